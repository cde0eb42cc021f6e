"""The documents REST API end to end: upload → queued job → ready, with the real queue,
the real database and an OpenAI-compatible embedding server on loopback."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts.tests.factories import make_api_key
from billing.models import CreditLedgerEntry
from billing.selectors import balance_get
from core.tenancy import account_context
from documents.models import Chunk, Document, EmbeddingBatch

TEXT = (
    "# Onboarding handbook\n\n"
    + "New starters get a laptop and a badge on day one. " * 40
    + "\n\n## Holidays\n\n"
    + "Everyone has twenty-eight days of paid holiday a year. " * 40
)


@pytest.fixture
def api(client, account_a, fake_llm, queue):
    key = make_api_key(account_a)

    class Api:
        account = account_a
        headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"}

        def upload(self, name, data, content_type="text/plain", capture=None):
            f = SimpleUploadedFile(name, data, content_type=content_type)
            return client.post("/api/v1/documents/", {"file": f}, **self.headers)

        def get(self, path):
            return client.get(path, **self.headers)

        def delete(self, path):
            return client.delete(path, **self.headers)

        def post(self, path):
            return client.post(path, **self.headers)

    return Api()


@pytest.fixture
def commit_and_run(django_capture_on_commit_callbacks, run_jobs):
    """Run a request, fire its on_commit hooks (enqueueing), then run the queued jobs."""

    def go(call):
        with django_capture_on_commit_callbacks(execute=True):
            response = call()
        run_jobs()
        return response

    return go


def test_upload_returns_202_pending_then_becomes_ready(api, commit_and_run):
    with_capture = commit_and_run(lambda: api.upload("handbook.md", TEXT.encode(), "text/markdown"))
    assert with_capture.status_code == 202
    body = with_capture.json()
    assert body["status"] == "pending" and body["name"] == "handbook.md"
    assert set(body) >= {
        "id",
        "name",
        "content_type",
        "size",
        "status",
        "error",
        "chunk_count",
        "token_count",
        "created_at",
        "updated_at",
    }
    detail = api.get(f"/api/v1/documents/{body['id']}/").json()
    assert detail["status"] == "ready", detail
    assert detail["chunk_count"] == len(detail["chunks"]) >= 3
    assert detail["language"] == "en"  # detected at ingestion (documents/language.py)
    assert detail["chunks"][0]["index"] == 0 and detail["chunks"][0]["token_count"] > 0
    assert detail["chunks"][0]["preview"]
    assert detail["token_count"] == sum(c["token_count"] for c in detail["chunks"])


def test_provider_tokens_are_recorded_and_debited_once(api, commit_and_run, fake_llm):
    doc_id = commit_and_run(lambda: api.upload("handbook.md", TEXT.encode(), "text/markdown")).json()["id"]
    embedded = [r for r in fake_llm.requests if r["path"].endswith("/embeddings")]
    reported = sum(len(t.split()) for r in embedded for t in r["body"]["input"])
    with account_context(api.account):
        document = Document.objects.for_account(api.account).get(pk=doc_id)
        entry = CreditLedgerEntry.objects.for_account(api.account).get(kind="embedding")
        assert document.embedding_tokens == reported == entry.tokens == -entry.delta
        assert entry.idempotency_key == f"ingest:{doc_id}:1"
        assert document.embedding_model == "all-minilm-l6-v2" and document.embedding_provider == "local"
        assert balance_get(account=api.account) == 10000 - reported
        assert not EmbeddingBatch.objects.for_account(api.account).exists()
        # Title and heading path go into the embedded text, not into the stored chunk.
        first_input = embedded[0]["body"]["input"][0]
        chunk = Chunk.objects.for_account(api.account).get(document_id=doc_id, chunk_index=0)
        prefix = first_input.split("\n")[0]
        assert prefix.startswith(document.title) and "Onboarding handbook" in prefix
        assert not chunk.content.startswith(prefix) and first_input.endswith(chunk.content)


def test_same_bytes_again_returns_the_existing_document(api, commit_and_run):
    first = commit_and_run(lambda: api.upload("a.txt", b"same bytes here"))
    second = commit_and_run(lambda: api.upload("b.txt", b"same bytes here"))
    assert first.status_code == 202 and second.status_code == 200
    assert second.json()["id"] == first.json()["id"]


def test_list_is_newest_first_and_paginated(api, commit_and_run):
    ids = [
        commit_and_run(lambda i=i: api.upload(f"n{i}.txt", f"note number {i}".encode())).json()["id"] for i in range(3)
    ]
    body = api.get("/api/v1/documents/?page_size=2").json()
    assert [d["id"] for d in body["results"]] == ids[::-1][:2] and body["next"]
    rest = api.get(body["next"]).json()
    assert [d["id"] for d in rest["results"]] == [ids[0]]


def test_delete_hides_at_once_and_a_job_cleans_up(api, commit_and_run, django_capture_on_commit_callbacks, run_jobs):
    from django.core.files.storage import default_storage

    doc_id = commit_and_run(lambda: api.upload("gone.txt", b"short lived text")).json()["id"]
    with account_context(api.account):
        stored = Document.objects.for_account(api.account).get(pk=doc_id).file.name
    assert default_storage.exists(stored)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.delete(f"/api/v1/documents/{doc_id}/")
    assert response.status_code == 202 and response.json()["status"] == "deleting"
    # Queued, not yet run: already gone for every reader.
    assert api.get(f"/api/v1/documents/{doc_id}/").status_code == 404
    assert doc_id not in [d["id"] for d in api.get("/api/v1/documents/").json()["results"]]
    assert run_jobs() == 1
    with account_context(api.account):
        assert not Document.objects.for_account(api.account).filter(pk=doc_id).exists()
        assert not Chunk.objects.for_account(api.account).filter(document_id=doc_id).exists()
    assert not default_storage.exists(stored)
    assert api.delete(f"/api/v1/documents/{doc_id}/").status_code == 404


def test_reindex_makes_a_new_revision_and_charges_it(api, commit_and_run):
    doc_id = commit_and_run(lambda: api.upload("r.md", TEXT.encode(), "text/markdown")).json()["id"]
    response = commit_and_run(lambda: api.post(f"/api/v1/documents/{doc_id}/reindex/"))
    assert response.status_code == 202
    detail = api.get(f"/api/v1/documents/{doc_id}/").json()
    assert detail["status"] == "ready" and detail["revision"] == 2
    with account_context(api.account):
        keys = set(
            CreditLedgerEntry.objects.for_account(api.account)
            .filter(kind="embedding")
            .values_list("idempotency_key", flat=True)
        )
        assert keys == {f"ingest:{doc_id}:1", f"ingest:{doc_id}:2"}
        assert set(
            Chunk.objects.for_account(api.account).filter(document_id=doc_id).values_list("revision", flat=True)
        ) == {2}


@pytest.mark.parametrize(
    "name, data, content_type, status, code",
    [
        ("empty.txt", b"", "text/plain", 400, "empty_file"),
        ("old.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 100, "application/msword", 415, "unsupported_type"),
        ("photo.gif", b"GIF89a" + b"\0" * 100, "image/gif", 415, "unsupported_type"),
        ("broken.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 100, "image/png", 415, "type_mismatch"),
        ("fake.txt", b"\x89PNG\r\n\x1a\n" + b"\0" * 100, "text/plain", 415, "type_mismatch"),
        ("fake.pdf", b"just text, no pdf header", "application/pdf", 415, "type_mismatch"),
    ],
)
def test_bad_uploads_are_clear_errors_and_store_nothing(api, name, data, content_type, status, code):
    response = api.upload(name, data, content_type)
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    with account_context(api.account):
        assert not Document.objects.for_account(api.account).exists()


def test_too_large_is_413(api, settings):
    settings.MAX_UPLOAD_BYTES = 1000
    response = api.upload("big.txt", b"word " * 500)
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"


def test_oversized_request_is_refused_before_reading_it(api, client, settings):
    settings.MAX_UPLOAD_BYTES = 1000
    response = client.post(
        "/api/v1/documents/", {"file": SimpleUploadedFile("big.txt", b"x " * 200_000)}, **api.headers
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large" and "MB limit" in response.json()["error"]["message"]


def test_missing_file_field_is_400(api, client):
    response = client.post("/api/v1/documents/", {}, **api.headers)
    assert response.status_code == 400 and response.json()["error"]["message"]


def test_not_enough_credits_to_start_is_402(api, settings):
    settings.MIN_CREDITS_TO_INGEST = 20000
    response = api.upload("a.txt", b"some text")
    assert response.status_code == 402
    assert response.json()["error"]["message"].startswith("This needs about 20,000 credits; the account has 10,000.")


def test_another_account_cannot_list_read_delete_or_reindex(api, commit_and_run, client, account_b):
    doc_id = commit_and_run(lambda: api.upload("secret.txt", b"the launch code is 1234")).json()["id"]
    other = {"HTTP_AUTHORIZATION": f"Bearer {make_api_key(account_b)}"}
    assert client.get("/api/v1/documents/", **other).json()["results"] == []
    assert client.get(f"/api/v1/documents/{doc_id}/", **other).status_code == 404
    assert client.delete(f"/api/v1/documents/{doc_id}/", **other).status_code == 404
    assert client.post(f"/api/v1/documents/{doc_id}/reindex/", **other).status_code == 404
    assert api.get(f"/api/v1/documents/{doc_id}/").json()["status"] == "ready"
    # Same bytes in B's account are B's own new document, not A's.
    f = SimpleUploadedFile("mine.txt", b"the launch code is 1234", content_type="text/plain")
    assert client.post("/api/v1/documents/", {"file": f}, **other).status_code == 202


def test_account_reindex_runs_every_document_with_progress(api, commit_and_run):
    ids = [
        commit_and_run(lambda i=i: api.upload(f"d{i}.txt", f"document {i} text".encode())).json()["id"]
        for i in range(2)
    ]
    started = commit_and_run(lambda: api.post("/api/v1/reindex/"))
    assert started.status_code == 202 and started.json()["total"] == 2
    run = api.get("/api/v1/reindex/").json()["run"]
    assert run["status"] == "done" and run["done"] == 2
    for doc_id in ids:
        assert api.get(f"/api/v1/documents/{doc_id}/").json()["revision"] == 2


def test_account_reindex_can_be_cancelled(api, commit_and_run, django_capture_on_commit_callbacks):
    commit_and_run(lambda: api.upload("d.txt", b"some document text"))
    run = api.post("/api/v1/reindex/").json()
    cancelled = api.post(f"/api/v1/reindex/{run['id']}/cancel/").json()
    assert cancelled["status"] == "cancelled"
    assert api.post("/api/v1/reindex/999999/cancel/").status_code == 404


def test_another_account_cannot_see_or_cancel_a_reindex_run(api, client, commit_and_run, account_b):
    commit_and_run(lambda: api.upload("d.txt", b"some document text"))
    run = api.post("/api/v1/reindex/").json()
    other = {"HTTP_AUTHORIZATION": f"Bearer {make_api_key(account_b)}"}
    assert client.get("/api/v1/reindex/", **other).json() == {"run": None}
    assert client.post(f"/api/v1/reindex/{run['id']}/cancel/", **other).status_code == 404
    assert api.get("/api/v1/reindex/").json()["run"]["status"] == "running"
