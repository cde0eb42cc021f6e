"""`manage.py backup --output FILE [--encrypt KEYFILE]`: one archive of the database, the
uploaded files and a manifest (config/backup.py; docs/operations/backups.md); `manage.py backup
--generate-key KEYFILE` writes a new key file for --encrypt."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from config.backup import BackupError, backup_create
from config.backup_crypto import EncryptionError, key_generate, key_read


class Command(BaseCommand):
    help = (
        "Write one .tar.gz archive (mode 0600): a consistent pg_dump of the database (sessions left "
        "out), every uploaded file and manifest.json (counts, migrations, checksums). The file appears "
        "only when complete. With --encrypt KEYFILE it is encrypted (AES-256-GCM)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--output", help="The archive to write, e.g. groundwork.tar.gz")
        parser.add_argument(
            "--encrypt", metavar="KEYFILE", help="Encrypt the archive with this key file (32 random bytes in base64)"
        )
        parser.add_argument(
            "--generate-key", metavar="KEYFILE", help="Write a new key file for --encrypt (mode 0600) and stop"
        )

    def handle(self, *args, **opts):
        if opts["generate_key"]:
            try:
                key_generate(Path(opts["generate_key"]))
            except EncryptionError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(
                f"Key written to {Path(opts['generate_key']).absolute()}. Keep a copy away from "
                "the backups: without it an encrypted archive cannot be restored."
            )
            return
        if not opts["output"]:
            raise CommandError("Give --output FILE (or --generate-key KEYFILE).")
        output = Path(opts["output"])
        if output.exists() and not output.is_file():
            raise CommandError(f"{output} exists and is not a file.")
        try:
            key = key_read(Path(opts["encrypt"])) if opts["encrypt"] else None
            manifest = backup_create(output=output, key=key)
        except (BackupError, EncryptionError) as exc:
            raise CommandError(str(exc)) from exc
        counts = ", ".join(f"{label} {n}" for label, n in manifest["counts"].items())
        sealed = " (encrypted)" if key else ""
        self.stdout.write(f"Backup written to {output.absolute()}{sealed}: {counts}, files {manifest['files']}.")
