"""`manage.py backup --output FILE`: one archive of the database, the uploaded files and a
manifest (config/backup.py; README "Backups")."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from config.backup import BackupError, backup_create


class Command(BaseCommand):
    help = ("Write one .tar.gz archive: a consistent pg_dump of the database, every uploaded file "
            "and manifest.json (counts, migrations, checksums). The file appears only when complete.")

    def add_arguments(self, parser):
        parser.add_argument("--output", required=True, help="The archive to write, e.g. groundwork.tar.gz")

    def handle(self, *args, **opts):
        output = Path(opts["output"])
        if output.exists() and not output.is_file():
            raise CommandError(f"{output} exists and is not a file.")
        try:
            manifest = backup_create(output=output)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        counts = ", ".join(f"{label} {n}" for label, n in manifest["counts"].items())
        self.stdout.write(f"Backup written to {output.absolute()}: {counts}, files {manifest['files']}.")
