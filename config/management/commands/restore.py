"""`manage.py restore FILE [--decrypt KEYFILE]`: an archive of `manage.py backup` into an
empty database and file storage (config/backup.py; docs/operations/backups.md)."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from config.backup import BackupError, backup_restore
from config.backup_crypto import EncryptionError, key_read


class Command(BaseCommand):
    help = (
        "Restore an archive made by `manage.py backup` into the configured database and file "
        "storage, which must both be empty. Every checksum (and, encrypted, every chunk's "
        "authentication) is verified before anything is written. Sessions are not in a backup: "
        "everyone signs in again."
    )

    def add_arguments(self, parser):
        parser.add_argument("archive", help="The archive written by manage.py backup")
        parser.add_argument(
            "--decrypt",
            "--key-file",
            dest="decrypt",
            metavar="KEYFILE",
            help="The key file an encrypted archive was made with (backup --encrypt)",
        )

    def handle(self, *args, **opts):
        try:
            key = key_read(Path(opts["decrypt"])) if opts["decrypt"] else None
            result = backup_restore(archive=Path(opts["archive"]), key=key)
        except (BackupError, EncryptionError) as exc:
            raise CommandError(str(exc)) from exc
        manifest = result["manifest"]
        counts = ", ".join(f"{label} {n}" for label, n in result["counts"].items())
        self.stdout.write(
            f"Restored the backup of {manifest['created_at']} (commit {manifest.get('git_commit')}): "
            f"{counts}, files {manifest['files']}; counts match the manifest, "
            "row-level security FORCEd on every tenant table."
        )
        self.stdout.write("Sessions are not kept in a backup: everyone is signed out and signs in again.")
