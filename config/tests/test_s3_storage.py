"""Uploaded files and exports in an S3-compatible bucket (STORAGE_BUCKET): a real
S3 server on loopback (moto's server mode, config.testing.s3_server), the app's own storage
backend (django-storages) talking to it over HTTP. The local media folder stays empty: a
second machine needs nothing of this one's disk.

Upload -> the worker reads the file back from the bucket and ingests it -> the document page
serves the original from the bucket (streamed through the app, to its readers only) -> a
data export is written to the bucket and its signed link downloads it -> delete removes the
object, and the export cleanup removes the expired zip.
"""

from __future__ import annotations

import datetime as dt
import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from config.testing import s3_keys, s3_server, s3_storages
from core.tenancy import account_context, user_context
from documents.models import Chunk, Document, Status
from documents.tests.images import image_file

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def bucket():
    with s3_server(bucket="groundwork-s3-test") as env:
        yield env


@pytest.fixture
def on_s3(bucket, settings, tmp_path):
    settings.STORAGES = s3_storages(bucket)
    settings.MEDIA_ROOT = str(tmp_path / "media")
    from django.core.files.storage import storages

    assert type(storages["default"]).__name__ == "S3Storage"
    return bucket


def _local_files(tmp_path) -> list:
    return [p for p in (tmp_path / "media").rglob("*") if p.is_file()]


def test_upload_ingest_page_and_delete_go_through_the_bucket(
    on_s3, client_a, account_a, fake_llm, run_jobs, django_capture_on_commit_callbacks, tmp_path
):
    text = b"# Travel\n\nTrains are booked through the office; flights need the director's approval."
    with django_capture_on_commit_callbacks(execute=True):
        response = client_a.post(
            "/api/v1/documents/", {"file": SimpleUploadedFile("travel.md", text, content_type="text/markdown")}
        )
    assert response.status_code == 202, response.content
    document_id = response.json()["id"]
    with account_context(account_a):
        stored = Document.objects.for_account(account_a).get(pk=document_id).file.name
    assert stored.startswith(f"accounts/{account_a.pk}/documents/") and stored.endswith(".md")
    assert s3_keys(on_s3, f"accounts/{account_a.pk}/") == [stored]

    run_jobs()  # the worker reads the file back from the bucket
    with account_context(account_a):
        document = Document.objects.for_account(account_a).get(pk=document_id)
        assert document.status == Status.READY, document.error
        assert "director's approval" in " ".join(
            Chunk.objects.for_account(account_a).filter(document=document).values_list("content", flat=True)
        )
    assert client_a.get(f"/documents/{document_id}/").status_code == 200
    assert _local_files(tmp_path) == []

    with django_capture_on_commit_callbacks(execute=True):
        client_a.post(f"/documents/{document_id}/reindex/")
    run_jobs()  # the worker reads it from the bucket again
    with account_context(account_a):
        document = Document.objects.for_account(account_a).get(pk=document_id)
        assert document.status == Status.READY and document.revision == 2, document.error

    with django_capture_on_commit_callbacks(execute=True):
        deleted = client_a.delete(f"/api/v1/documents/{document_id}/")
    assert deleted.status_code == 202
    run_jobs()
    assert s3_keys(on_s3, f"accounts/{account_a.pk}/") == []
    with account_context(account_a):
        assert not Document.objects.for_account(account_a).filter(pk=document_id).exists()


def test_an_image_original_is_served_from_the_bucket_to_its_readers_only(
    on_s3, client, account_a, owner_a, owner_b, fake_llm, upload_and_ingest
):
    picture = image_file(["Invoice 7", "Total 12 EUR"], "png")
    document = upload_and_ingest(account_a, "invoice.png", picture, "image/png")
    assert document.status == Status.READY, document.error
    assert document.file.name in s3_keys(on_s3, f"accounts/{account_a.pk}/")
    client.force_login(owner_a)
    image = client.get(f"/documents/{document.pk}/image/")
    assert image.status_code == 200 and image["Content-Type"] == "image/png"
    assert b"".join(image.streaming_content) == picture
    client.force_login(owner_b)
    assert client.get(f"/documents/{document.pk}/image/").status_code == 404


def test_an_export_is_written_to_the_bucket_and_its_signed_link_downloads_it(
    on_s3, client_a, account_a, owner_a, fake_llm, run_jobs, django_capture_on_commit_callbacks, tmp_path
):
    from exports.jobs import cleanup_exports
    from exports.models import DataExport

    with django_capture_on_commit_callbacks(execute=True):
        uploaded = client_a.post(
            "/api/v1/documents/",
            {"file": SimpleUploadedFile("notes.txt", b"EXPORTMARKER the roadmap.", content_type="text/plain")},
        )
    assert uploaded.status_code == 202
    run_jobs()
    with django_capture_on_commit_callbacks(execute=True):
        created = client_a.post("/api/v1/exports/")
    assert created.status_code == 202
    run_jobs()
    body = client_a.get(f"/api/v1/exports/{created.json()['id']}/").json()
    assert body["status"] == "ready", body
    exports = s3_keys(on_s3, "exports/")
    assert len(exports) == 1 and exports[0].endswith(".zip")

    response = client_a.get(body["download_url"])
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert any(archive.read(name) == b"EXPORTMARKER the roadmap." for name in archive.namelist())
    assert _local_files(tmp_path) == []

    with user_context(owner_a):
        DataExport.objects.for_user(owner_a).filter(pk=created.json()["id"]).update(
            expires_at=timezone.now() - dt.timedelta(minutes=1)
        )
    with django_capture_on_commit_callbacks(execute=True):
        cleanup_exports()
    assert s3_keys(on_s3, "exports/") == []
    assert client_a.get(body["download_url"]).status_code == 410


def test_a_deleted_accounts_files_leave_the_bucket_and_another_accounts_stay(
    on_s3, account_a, account_b, fake_llm, upload_and_ingest, run_jobs, django_capture_on_commit_callbacks
):
    from accounts.services import account_delete

    for name in ("one.txt", "two.txt"):
        upload_and_ingest(account_a, name, f"Acme {name} notes.".encode())
    kept = upload_and_ingest(account_b, "beta.txt", b"Beta keeps its plants by the window.")
    assert len(s3_keys(on_s3, f"accounts/{account_a.pk}/")) == 2
    with django_capture_on_commit_callbacks(execute=True):
        account_delete(account=account_a, actor=account_a.test_owner)
    run_jobs()
    assert s3_keys(on_s3, f"accounts/{account_a.pk}/") == []
    assert s3_keys(on_s3, f"accounts/{account_b.pk}/") == [kept.file.name]


def test_these_tests_store_through_exactly_what_settings_builds_from_the_bucket_settings(bucket):
    """s3_storages() (the in-process tests above) is what config/settings.py makes of the same
    environment (the node processes of test_two_nodes.py read it from there)."""
    import json
    import os
    import subprocess
    import sys

    from config.embedded import BASE_DIR

    env = dict(os.environ, **bucket)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from config import settings; print(json.dumps(settings.STORAGES['default']))",
        ],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(built.stdout.strip().splitlines()[-1]) == s3_storages(bucket)["default"]
