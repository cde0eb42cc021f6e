"""Backups and restore (config/backup.py) on the tests' own embedded PostgreSQL: a second,
empty database made by the owner role is the restore target, a second folder its media."""

from __future__ import annotations

import datetime as dt
import filecmp
import gzip
import io
import json
import tarfile
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from django.core.files.storage import FileSystemStorage
from django.core.management import CommandError, call_command
from django.db import connections

from accounts.tests.factories import make_api_key
from billing.selectors import balance_get
from billing.services import credits_grant
from config.backup import (
    BackupError,
    Target,
    backup_archives,
    backup_create,
    backup_restore,
    scheduled_backup,
    unforced_tenant_tables,
)
from core.db_owner import owner_connection
from core.tenancy import account_context

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def restore_target():
    """An empty database (CREATE DATABASE by the owner role, from template1 with pgvector)."""
    name = f"test_restore_{uuid.uuid4().hex[:10]}"
    with owner_connection() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield Target.from_settings(name=name)
    finally:
        with owner_connection() as conn:
            # The app role's connections to it (the restore's, the checks') are closed, but their
            # server processes may still be exiting on a busy machine; the owner may not terminate
            # another role's process (FORCE would refuse), so it waits for them to be gone.
            deadline = time.monotonic() + 30
            while (
                time.monotonic() < deadline
                and conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [name]
                ).fetchone()[0]
            ):
                time.sleep(0.1)
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def media(settings, tmp_path):
    """Each test's own media folder; `media.switch()` moves the storage to a second, empty one."""

    class Media:
        first = tmp_path / "media1"
        second = tmp_path / "media2"

        def switch(self):
            settings.MEDIA_ROOT = str(self.second)

    Media.first.mkdir()
    settings.MEDIA_ROOT = str(Media.first)
    return Media()


def snapshot(target: Target) -> dict[str, list[str]]:
    """Every row of every table (public and the private schema), as PostgreSQL's text of
    the row, sorted: vectors, ledger entries and balances compared exactly."""
    with target.connect(bypass=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables"
                " WHERE schemaname IN ('public', 'groundwork_private') ORDER BY 1"
            ).fetchall()
        ]
        return {t: [r[0] for r in conn.execute(f"SELECT x::text FROM {t} AS x ORDER BY 1").fetchall()] for t in tables}


@pytest.fixture
def on_database():
    """Run a block with Django's default connection on another database (then back)."""
    import contextlib

    conn = connections["default"]

    def close():
        conn.close()
        if conn.settings_dict["OPTIONS"].get("pool"):
            conn.close_pool()

    @contextlib.contextmanager
    def go(name):
        saved = conn.settings_dict["NAME"]
        close()
        conn.settings_dict["NAME"] = name
        try:
            yield
        finally:
            close()
            conn.settings_dict["NAME"] = saved

    return go


def _search(account, query):
    from retrieval.search.query import search_for_query

    with account_context(account):
        hits = search_for_query(account=account, query=query, key=f"search:{uuid.uuid4().hex}")
    return [(h.chunk_id, h.document_id, h.chunk_index, round(h.score, 6)) for h in hits]


def _chat(client, key, message, conversation_id=None):
    body = {"message": message, **({"conversation_id": conversation_id} if conversation_id else {})}
    response = client.post("/api/v1/chat/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content
    return response.json()["conversation_id"]


def test_round_trip_restores_every_account_exactly(
    client, account_a, account_b, fake_llm, upload_and_ingest, media, restore_target, on_database, tmp_path
):
    upload_and_ingest(
        account_a,
        "handbook.md",
        b"# Holidays\n\nEveryone has twenty-eight days of paid "
        b"holiday a year.\n\n# Laptops\n\nNew starters receive a laptop on day one.",
    )
    upload_and_ingest(account_a, "travel.txt", b"Trains are booked through the office. " * 40)
    upload_and_ingest(account_b, "beta.md", b"# Beta\n\nBeta's own secret roadmap: ship the rocket in May.")
    with account_context(account_a):
        credits_grant(account=account_a, amount=5000, reason="annual plan")
    key_a, key_b = make_api_key(account_a), make_api_key(account_b)
    conversation = _chat(client, key_a, "How much holiday do we get?")
    _chat(client, key_a, "And laptops?", conversation)
    _chat(client, key_b, "When does the rocket ship?")
    before_hits = _search(account_a, "holiday days")
    assert before_hits
    with account_context(account_a):
        balance_a = balance_get(account=account_a)

    archive = tmp_path / "out" / "groundwork.tar.gz"
    archive.parent.mkdir()
    call_command("backup", output=str(archive))
    assert [p.name for p in archive.parent.iterdir()] == ["groundwork.tar.gz"]  # no staging left
    source = snapshot(Target.from_settings())

    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())
    assert names[0] == "manifest.json" and "database.dump" in names
    assert set(names[1:]) == set(manifest["sha256"])
    assert manifest["counts"]["accounts"] == 2 and manifest["counts"]["documents"] == 3
    assert manifest["counts"]["conversations"] == 2 and manifest["counts"]["messages"] == 6
    assert manifest["counts"]["chunks"] > 3 and manifest["counts"]["ledger_entries"] > 4
    assert "billing.0001_initial" in manifest["migrations"] and manifest["format_version"] == 1
    assert manifest["files"] == 3 and manifest["git_commit"]

    media.switch()
    result = backup_restore(archive=archive, target=restore_target)
    assert result["counts"] == manifest["counts"]

    restored = snapshot(restore_target)
    assert restored.keys() == source.keys()
    for table in source:
        assert restored[table] == source[table], table
    assert sum(len(rows) for rows in source.values()) > 50
    # The files, byte for byte.
    compare = filecmp.dircmp(media.first, media.second)
    assert not compare.left_only and not compare.right_only
    for path in Path(media.first).rglob("*"):
        if path.is_file():
            assert (Path(media.second) / path.relative_to(media.first)).read_bytes() == path.read_bytes()

    # RLS FORCEd on every tenant table; the app role is still plain and sees nothing unscoped.
    with restore_target.connect() as conn:
        assert unforced_tenant_tables(conn) == []
        forced = conn.execute("SELECT count(*) FROM pg_class WHERE relforcerowsecurity").fetchone()[0]
        assert forced >= 15
    s = connections["default"].settings_dict
    with psycopg.connect(dbname=restore_target.name, host=s["HOST"], port=s["PORT"], user=s["USER"]) as app:
        assert app.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").fetchone() == (
            False,
            False,
        )
        assert app.execute("SELECT count(*) FROM documents_document").fetchone()[0] == 0
        assert app.execute("SELECT count(*) FROM documents_chunk").fetchone()[0] == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.execute("ALTER TABLE documents_document NO FORCE ROW LEVEL SECURITY")

    # The restored database serves: balances, isolation and the same search results.
    with on_database(restore_target.name):
        with account_context(account_a):
            assert balance_get(account=account_a) == balance_a
        from documents.models import Document

        with account_context(account_b):
            assert sorted(Document.objects.for_account(account_b).values_list("name", flat=True)) == ["beta.md"]
        # (Sorted: passages of equal score may come in either order from another heap.)
        assert sorted(_search(account_a, "holiday days")) == sorted(before_hits)
        with account_context(account_a):
            from documents.models import Document as D

            doc = D.objects.for_account(account_a).get(name="handbook.md")
            assert doc.file.read().startswith(b"# Holidays")  # read from the second folder


def _small_backup(account, upload_and_ingest, path: Path) -> Path:
    upload_and_ingest(account, "notes.txt", b"Release notes: version two ships on Friday.")
    backup_create(output=path)
    return path


def _nothing_written(target: Target, folder: Path) -> None:
    with target.connect() as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0
    assert not folder.exists() or not any(p.is_file() for p in folder.rglob("*"))


def test_a_corrupted_archive_restores_nothing(account_a, fake_llm, upload_and_ingest, media, restore_target, tmp_path):
    archive = _small_backup(account_a, upload_and_ingest, tmp_path / "good.tar.gz")
    media.switch()

    # One byte changed in the compressed file: refused (gzip's check or a checksum).
    raw = bytearray(archive.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    flipped = tmp_path / "flipped.tar.gz"
    flipped.write_bytes(bytes(raw))
    with pytest.raises(CommandError, match="damaged"):
        call_command("restore", str(flipped))  # (the configured database is not even looked at)
    with pytest.raises(BackupError, match="damaged"):
        backup_restore(archive=flipped, target=restore_target)
    _nothing_written(restore_target, media.second)

    # One byte changed inside the dump, archive re-packed with the old manifest: the checksum.
    repacked = tmp_path / "repacked.tar.gz"
    with tarfile.open(archive) as src, tarfile.open(repacked, "w:gz") as dst:
        for member in src:
            data = bytearray(src.extractfile(member).read())
            if member.name == "database.dump":
                data[len(data) // 2] ^= 0x01
            dst.addfile(member, io.BytesIO(bytes(data)))
    with pytest.raises(BackupError, match="database.dump does not match its checksum"):
        backup_restore(archive=repacked, target=restore_target)
    _nothing_written(restore_target, media.second)

    # A valid archive of a newer version (a migration unknown here): refused before any write.
    newer = tmp_path / "newer.tar.gz"
    with tarfile.open(archive) as src, tarfile.open(newer, "w:gz") as dst:
        for member in src:
            data = src.extractfile(member).read()
            if member.name == "manifest.json":
                manifest = json.loads(data)
                manifest["migrations"].append("documents.9999_from_the_future")
                data = json.dumps(manifest).encode()
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    with pytest.raises(BackupError, match="made by a newer version.*documents.9999_from_the_future"):
        backup_restore(archive=newer, target=restore_target)
    _nothing_written(restore_target, media.second)

    # Not a backup at all.
    bogus = tmp_path / "bogus.tar.gz"
    bogus.write_bytes(gzip.compress(b"hello"))
    with pytest.raises(BackupError):
        backup_restore(archive=bogus, target=restore_target)
    _nothing_written(restore_target, media.second)


def test_a_non_empty_target_is_refused(account_a, fake_llm, upload_and_ingest, media, restore_target, tmp_path):
    archive = _small_backup(account_a, upload_and_ingest, tmp_path / "b.tar.gz")
    # The configured (test) database has tables: refused, with how to empty it.
    with pytest.raises(CommandError, match="is not empty.*CREATE DATABASE"):
        call_command("restore", str(archive))
    # An empty database but files in the storage: refused too, the database left empty.
    with pytest.raises(BackupError, match="file storage .* is not empty"):
        backup_restore(archive=archive, target=restore_target)
    _nothing_written(restore_target, tmp_path / "nothing")


def test_backup_errors_are_clear_and_leave_no_file(account_a, media, tmp_path):
    with pytest.raises(CommandError, match="does not exist: create it first"):
        call_command("backup", output=str(tmp_path / "missing" / "b.tar.gz"))
    s = connections["default"].settings_dict
    unreachable = Target(name="groundwork", host="127.0.0.1", port="1", user="nobody", password=None)
    with pytest.raises(BackupError, match="Cannot reach the database"):
        backup_create(output=tmp_path / "b.tar.gz", target=unreachable)
    assert list(tmp_path.iterdir()) == [tmp_path / "media1"]
    assert s["NAME"]  # (the configured database untouched)
    # A failure half-way (the dump made, a file that cannot be read): no archive, no temp left.
    (media.first / "ok.txt").write_bytes(b"fine")
    (media.first / "gone.txt").symlink_to(tmp_path / "nowhere")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(CommandError, match="Backup failed writing"):
        call_command("backup", output=str(out / "b.tar.gz"))
    assert list(out.iterdir()) == []


def test_scheduled_backups_run_once_per_period_and_keep_the_newest(account_a, media, settings, tmp_path):
    settings.BACKUP_SCHEDULE, settings.BACKUP_DIR, settings.BACKUP_KEEP = "daily", str(tmp_path / "b"), 2
    start = dt.datetime(2001, 1, 1, 3, 0, tzinfo=dt.UTC) + dt.timedelta(days=uuid.uuid4().int % 50000)
    import django_rq

    redis = django_rq.get_connection("default")
    days = [start + dt.timedelta(days=n) for n in range(3)]
    try:
        first = scheduled_backup(now=days[0])
        assert first is not None and first.exists()
        # Another cron process (or the next minute) the same day: nothing more.
        assert scheduled_backup(now=days[0] + dt.timedelta(hours=5)) is None
        second, third = scheduled_backup(now=days[1]), scheduled_backup(now=days[2])
        assert backup_archives(tmp_path / "b") == [second, third]  # the oldest beyond KEEP removed
        settings.BACKUP_SCHEDULE = None
        assert scheduled_backup(now=days[2] + dt.timedelta(days=5)) is None
    finally:
        for key in redis.keys("*:backup:daily:*"):
            redis.delete(key)


@pytest.fixture
def s3_server():
    """moto's S3 in server mode on loopback (a real HTTP server the storage API talks to)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def _bucket_storage(settings, endpoint: str, bucket: str):
    import boto3

    boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    ).create_bucket(Bucket=bucket)
    settings.STORAGE_BUCKET = bucket
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": bucket,
                "endpoint_url": endpoint,
                "region_name": "us-east-1",
                "access_key": "test",
                "secret_key": "test",
                "default_acl": None,
                "file_overwrite": False,
            },
        },
    }


def _objects(endpoint: str, bucket: str) -> dict[str, bytes]:
    import boto3

    s3 = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {key: s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}


def test_files_in_a_bucket_are_backed_up_and_restored_into_another(
    account_a, fake_llm, upload_and_ingest, settings, s3_server, restore_target, tmp_path
):
    _bucket_storage(settings, s3_server, "groundwork-live")
    upload_and_ingest(account_a, "bucket.txt", b"Stored in the bucket: the quarterly plan.")
    upload_and_ingest(account_a, "second.txt", b"Another object in the bucket.")
    live = _objects(s3_server, "groundwork-live")
    assert len(live) == 2
    archive = tmp_path / "bucket.tar.gz"
    manifest = backup_create(output=archive)
    assert manifest["files"] == 2

    _bucket_storage(settings, s3_server, "groundwork-restored")
    backup_restore(archive=archive, target=restore_target)
    assert _objects(s3_server, "groundwork-restored") == live
    # A bucket that is not empty is refused like a folder.
    with owner_connection() as conn:
        conn.execute(f'DROP DATABASE "{restore_target.name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{restore_target.name}"')
    with pytest.raises(BackupError, match="file storage .* is not empty"):
        backup_restore(archive=archive, target=restore_target)


# --- what an archive holds, and who may read it ---------------------------------------------


class WatchingStorage(FileSystemStorage):
    """Django's file storage, noting the mode of everything in `folder` (where the backup
    stages its dump and files) whenever the backup reads a file: the moment they are staged."""

    folder: Path | None = None
    seen: list[tuple[str, int]] = []

    def open(self, name, mode="rb"):
        for path in sorted(self.folder.rglob("*")):
            self.seen.append((str(path.relative_to(self.folder)), path.stat().st_mode & 0o777))
        return super().open(name, mode)


@pytest.fixture
def umask():
    import os

    saved = os.umask(0o022)
    os.umask(saved)

    def set_to(value):
        os.umask(value)

    yield set_to
    os.umask(saved)


@pytest.mark.parametrize("mask", [0o022, 0o000])
def test_the_archive_and_its_staging_folder_are_private_whatever_the_umask(
    account_a, fake_llm, upload_and_ingest, media, settings, tmp_path, umask, mask
):
    import stat

    upload_and_ingest(account_a, "notes.txt", b"Release notes: version two ships on Friday.")
    out = tmp_path / "out"
    out.mkdir()
    WatchingStorage.seen, WatchingStorage.folder = [], out
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": f"{__name__}.WatchingStorage", "OPTIONS": {"location": str(media.first)}},
    }
    umask(mask)
    call_command("backup", output=str(out / "b.tar.gz"))
    archive = out / "b.tar.gz"
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    staging = [(name, mode) for name, mode in WatchingStorage.seen if "/" not in name]
    assert staging and all(mode == 0o700 for _, mode in staging), WatchingStorage.seen
    with tarfile.open(archive) as tar:
        assert {member.mode for member in tar} == {0o600}


def _dump_entries(archive: Path, tmp_path: Path) -> list[str]:
    """pg_restore's table of contents of the archive's dump."""
    import subprocess

    from config.backup import _binary

    with tarfile.open(archive) as tar:
        (tmp_path / "toc.dump").write_bytes(tar.extractfile("database.dump").read())
    return subprocess.run(
        [_binary("pg_restore"), "--list", str(tmp_path / "toc.dump")], capture_output=True, text=True, check=True
    ).stdout.splitlines()


def test_sessions_and_the_signing_key_are_left_out_and_restore_signs_everyone_out(
    client_a, owner_a, account_a, fake_llm, upload_and_ingest, media, restore_target, on_database, tmp_path
):
    from django.contrib.sessions.models import Session

    upload_and_ingest(account_a, "notes.txt", b"Release notes: version two ships on Friday.")
    assert client_a.get("/documents/").status_code == 200  # a live session in the database
    assert Session.objects.count() >= 1
    archive = tmp_path / "b.tar.gz"
    call_command("backup", output=str(archive))

    toc = _dump_entries(archive, tmp_path)
    assert any("TABLE public django_session" in line for line in toc)  # the table is kept...
    assert not any("TABLE DATA public django_session" in line for line in toc)  # ...not its rows
    assert not any("TABLE DATA groundwork_private context_key" in line for line in toc)
    assert any("TABLE DATA public documents_document" in line for line in toc)

    media.switch()
    out = io.StringIO()
    with on_database(restore_target.name):
        call_command("restore", str(archive), stdout=out)
    assert "everyone is signed out" in out.getvalue()
    with restore_target.connect(bypass=True) as conn:
        assert conn.execute("SELECT count(*) FROM django_session").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM groundwork_private.context_key").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM documents_document").fetchone()[0] == 1


# --- encrypted archives ---------------------------------------------------------------------


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "backup.key"
    call_command("backup", generate_key=str(path), stdout=io.StringIO())
    return path


def test_an_encrypted_archive_round_trips_and_holds_nothing_readable(
    account_a, fake_llm, upload_and_ingest, media, restore_target, on_database, key_file, tmp_path
):
    import stat

    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    secret = b"Release notes: the codename is BLUEHERON and it ships on Friday."
    upload_and_ingest(account_a, "notes.txt", secret)
    archive = tmp_path / "b.tar.gz.enc"
    out = io.StringIO()
    call_command("backup", output=str(archive), encrypt=str(key_file), stdout=out)
    assert "(encrypted)" in out.getvalue()
    raw = archive.read_bytes()
    assert raw.startswith(b"groundwork-backup-aes256gcm-v1\n") and b"BLUEHERON" not in raw
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    with pytest.raises(tarfile.TarError):
        tarfile.open(archive)

    media.switch()
    # Not without its key.
    with on_database(restore_target.name), pytest.raises(CommandError, match="is encrypted: give its key file"):
        call_command("restore", str(archive))
    with on_database(restore_target.name):
        call_command("restore", str(archive), decrypt=str(key_file), stdout=io.StringIO())
    with restore_target.connect(bypass=True) as conn:
        assert conn.execute("SELECT count(*) FROM documents_document").fetchone()[0] == 1
    restored = [p for p in Path(media.second).rglob("*") if p.is_file()]
    assert [p.read_bytes() for p in restored] == [secret]


def test_a_wrong_key_or_a_tampered_encrypted_archive_restores_nothing(
    account_a, fake_llm, upload_and_ingest, media, restore_target, key_file, tmp_path
):
    from config.backup_crypto import key_read

    upload_and_ingest(account_a, "notes.txt", b"Release notes: version two ships on Friday.")
    archive = tmp_path / "b.tar.gz.enc"
    key = key_read(key_file)
    backup_create(output=archive, key=key)
    plain = backup_create(output=tmp_path / "plain.tar.gz") and tmp_path / "plain.tar.gz"
    media.switch()
    raw = archive.read_bytes()

    other = tmp_path / "other.key"
    call_command("backup", generate_key=str(other), stdout=io.StringIO())
    with pytest.raises(BackupError, match="was not encrypted with this key"):
        backup_restore(archive=archive, target=restore_target, key=key_read(other))
    _nothing_written(restore_target, media.second)

    def variant(name, data):
        path = tmp_path / name
        path.write_bytes(data)
        return path

    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0x01
    header = len(b"groundwork-backup-aes256gcm-v1\n") + 32 + 16 + 4
    for path in (
        variant("flipped.enc", bytes(flipped)),
        variant("cut.enc", raw[:-100]),  # the last chunk cut short
        variant("no-end.enc", raw[:header]),  # the header alone
        variant("longer.enc", raw + b"\x00" * 16),
    ):  # something added after the end
        with pytest.raises(BackupError, match="damaged or was tampered with"):
            backup_restore(archive=path, target=restore_target, key=key)
        _nothing_written(restore_target, media.second)
    # A plain archive given a key: said so.
    with pytest.raises(BackupError, match="is not encrypted: restore it without --decrypt"):
        backup_restore(archive=plain, target=restore_target, key=key)


def test_key_files_are_checked_before_anything_is_dumped(account_a, media, tmp_path):
    bad = tmp_path / "bad.key"
    bad.write_text("not a key at all\n")
    short = tmp_path / "short.key"
    short.write_text("c2hvcnQ=\n")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(CommandError, match="is not base64.*--generate-key"):
        call_command("backup", output=str(out / "b.tar.gz"), encrypt=str(bad))
    with pytest.raises(CommandError, match="holds 5 bytes, not 32"):
        call_command("backup", output=str(out / "b.tar.gz"), encrypt=str(short))
    with pytest.raises(CommandError, match="does not exist"):
        call_command("backup", output=str(out / "b.tar.gz"), encrypt=str(tmp_path / "missing.key"))
    assert list(out.iterdir()) == []
    key = tmp_path / "k.key"
    call_command("backup", generate_key=str(key), stdout=io.StringIO())
    with pytest.raises(CommandError, match="exists already"):
        call_command("backup", generate_key=str(key))


def test_scheduled_backups_are_encrypted_with_the_key_file(account_a, media, settings, key_file, tmp_path):
    import stat

    settings.BACKUP_SCHEDULE, settings.BACKUP_DIR, settings.BACKUP_KEEP = "hourly", str(tmp_path / "b"), 1
    settings.BACKUP_KEY_FILE = str(key_file)
    start = dt.datetime(2001, 1, 1, 3, 0, tzinfo=dt.UTC) + dt.timedelta(hours=uuid.uuid4().int % 500000)
    import django_rq

    redis = django_rq.get_connection("default")
    try:
        first = scheduled_backup(now=start)
        assert first.name.endswith(".tar.gz.enc") and first.read_bytes().startswith(b"groundwork-backup-aes256gcm")
        second = scheduled_backup(now=start + dt.timedelta(hours=1))
        assert stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o700
        assert backup_archives(tmp_path / "b") == [second]  # encrypted ones are pruned like the rest
    finally:
        for key in redis.keys("*:backup:hourly:*"):
            redis.delete(key)
