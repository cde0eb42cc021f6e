"""`manage.py restore FILE`: an archive of `manage.py backup` into an empty database and
file storage (config/backup.py; README "Backups")."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from config.backup import BackupError, backup_restore


class Command(BaseCommand):
    help = ("Restore an archive made by `manage.py backup` into the configured database and file "
            "storage, which must both be empty. Every checksum is verified before anything is written.")

    def add_arguments(self, parser):
        parser.add_argument("archive", help="The .tar.gz written by manage.py backup")

    def handle(self, *args, **opts):
        try:
            result = backup_restore(archive=Path(opts["archive"]))
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        manifest = result["manifest"]
        counts = ", ".join(f"{label} {n}" for label, n in result["counts"].items())
        self.stdout.write(f"Restored the backup of {manifest['created_at']} (commit {manifest.get('git_commit')}): "
                          f"{counts}, files {manifest['files']}; counts match the manifest, "
                          "row-level security FORCEd on every tenant table.")
