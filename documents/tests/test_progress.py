"""A document being indexed says how far it has got and how long it has left: chunks embedded
of its total, the time left at this server's measured rate, and while it waits, its place in
its account's queue (CONTRACT: `progress` in `GET documents/{id}/`; documents/progress.py)."""

import pytest
from django.core.cache import cache

from accounts.tests.factories import make_api_key
from core.tenancy import account_context
from documents import ingestion, progress
from documents.models import Document, Status
from documents.services import document_upload

pytestmark = pytest.mark.django_db


def _auth(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


@pytest.fixture(autouse=True)
def _no_rate_measured():
    for model in ("all-minilm-l6-v2", "multilingual-e5-small", "text-embedding-3-small"):
        cache.delete(progress._rate_key(model))
    yield


def _upload(account, name, text, django_capture_on_commit_callbacks):
    from django.core.files.uploadedfile import SimpleUploadedFile

    with account_context(account), django_capture_on_commit_callbacks(execute=False):
        document, _ = document_upload(
            account=account, actor=None, upload=SimpleUploadedFile(name, text.encode(), content_type="text/plain")
        )
    return document


def _model(account):
    from documents.embedding import active_embedding_model

    with account_context(account):
        return active_embedding_model(account_id=account.pk).model


def test_the_rate_is_a_moving_average_of_what_runs_measured():
    assert progress.measured_rate("all-minilm-l6-v2") is None
    progress.rate_record("all-minilm-l6-v2", chunks=100, seconds=10)
    assert progress.measured_rate("all-minilm-l6-v2") == pytest.approx(10.0)
    progress.rate_record("all-minilm-l6-v2", chunks=40, seconds=10)  # the server got busy
    assert progress.measured_rate("all-minilm-l6-v2") == pytest.approx(0.7 * 10 + 0.3 * 4)
    progress.rate_record("all-minilm-l6-v2", chunks=0, seconds=0)  # nothing measured: no change
    assert progress.measured_rate("all-minilm-l6-v2") == pytest.approx(8.2)
    assert progress.measured_rate("multilingual-e5-small") is None  # per model


@pytest.mark.parametrize(
    "seconds,words",
    [(0, "about 1 s"), (42, "about 42 s"), (61, "about 2 min"), (3600, "about 1 h"), (4801, "about 1 h 21 min")],
)
def test_time_left_in_words(seconds, words):
    assert progress.duration_text(seconds) == words


@pytest.mark.parametrize(
    "n,words",
    [
        (1, "1st"),
        (2, "2nd"),
        (3, "3rd"),
        (4, "4th"),
        (11, "11th"),
        (12, "12th"),
        (13, "13th"),
        (21, "21st"),
        (1002, "1,002nd"),
    ],
)
def test_places_in_line(n, words):
    assert progress.ordinal(n) == words


def test_a_processing_document_shows_chunks_and_the_time_left_at_the_measured_rate(
    client, account_a, django_capture_on_commit_callbacks
):
    key = make_api_key(account_a)
    document = _upload(account_a, "handbook.txt", "Holiday rules. " * 50, django_capture_on_commit_callbacks)
    with account_context(account_a):
        Document.objects.for_account(account_a).filter(pk=document.pk).update(
            status=Status.PROCESSING, chunks_total=0, chunks_embedded=0
        )
    body = client.get(f"/api/v1/documents/{document.pk}/", **_auth(key)).json()
    assert body["progress"] == {  # being read: nothing counted yet, no time promised
        "chunks_embedded": 0,
        "chunks_total": 0,
        "eta_seconds": None,
        "chunks_per_second": None,
        "queue_position": None,
    }
    with account_context(account_a):
        Document.objects.for_account(account_a).filter(pk=document.pk).update(chunks_total=1250, chunks_embedded=412)
    body = client.get(f"/api/v1/documents/{document.pk}/", **_auth(key)).json()
    assert body["progress"]["chunks_embedded"] == 412 and body["progress"]["chunks_total"] == 1250
    assert body["progress"]["eta_seconds"] is None  # no rate measured yet: no promise
    progress.rate_record(_model(account_a), chunks=35, seconds=10)
    body = client.get(f"/api/v1/documents/{document.pk}/", **_auth(key)).json()
    assert body["progress"]["eta_seconds"] == 240  # 838 chunks left at 3.5 a second
    assert body["progress"]["chunks_per_second"] == 3.5
    with account_context(account_a):
        shown = Document.objects.for_account(account_a).get(pk=document.pk)
        assert progress.page_context([shown]).text(shown) == "412/1,250 chunks · about 4 min left"


def test_waiting_documents_say_their_place_in_their_own_accounts_queue(
    client, account_a, account_b, django_capture_on_commit_callbacks
):
    key_a, key_b = make_api_key(account_a), make_api_key(account_b)
    first_b = _upload(account_b, "b1.txt", "Beta one.", django_capture_on_commit_callbacks)
    first = _upload(account_a, "a1.txt", "Acme one.", django_capture_on_commit_callbacks)
    _upload(account_b, "b2.txt", "Beta two.", django_capture_on_commit_callbacks)
    second = _upload(account_a, "a2.txt", "Acme two.", django_capture_on_commit_callbacks)
    third = _upload(account_a, "a3.txt", "Acme three.", django_capture_on_commit_callbacks)

    def place(key, document):
        body = client.get(f"/api/v1/documents/{document.pk}/", **_auth(key)).json()
        assert body["status"] == "pending"
        assert body["progress"]["chunks_embedded"] == 0 and body["progress"]["eta_seconds"] is None
        return body["progress"]["queue_position"]

    # Account B's waiting documents do not move account A's places (nor show through them).
    assert [place(key_a, d) for d in (first, second, third)] == [1, 2, 3]
    assert place(key_b, first_b) == 1
    listed = client.get("/api/v1/documents/", **_auth(key_a)).json()["results"]
    assert {d["name"]: d["progress"]["queue_position"] for d in listed} == {"a1.txt": 1, "a2.txt": 2, "a3.txt": 3}
    # The first one taken: the others move up.
    with account_context(account_a):
        Document.objects.for_account(account_a).filter(pk=first.pk).update(status=Status.PROCESSING)
    assert [place(key_a, d) for d in (second, third)] == [1, 2]
    # Another account's document is not found (no progress of it either).
    assert client.get(f"/api/v1/documents/{first_b.pk}/", **_auth(key_a)).status_code == 404


def test_the_knowledge_base_page_shows_the_place_and_the_chunks(
    client_a, account_a, django_capture_on_commit_callbacks
):
    waiting = [_upload(account_a, f"w{i}.txt", f"Waiting {i}.", django_capture_on_commit_callbacks) for i in range(2)]
    with account_context(account_a):
        Document.objects.for_account(account_a).filter(pk=waiting[0].pk).update(
            status=Status.PROCESSING, chunks_total=300, chunks_embedded=96
        )
    progress.rate_record(_model(account_a), chunks=2, seconds=1)
    page = client_a.get("/documents/").content.decode()
    assert "Processing · 96/300 chunks · about 2 min left" in page  # 204 left at 2 a second
    assert 'max="300" value="96"' in page
    assert "Pending · 1st in line" in page
    detail = client_a.get(f"/documents/{waiting[1].pk}/").content.decode()
    assert "Pending · 1st in line" in detail
    status = client_a.get("/documents/status/").json()["documents"]
    assert {d["name"]: d["progress"]["chunks_embedded"] for d in status} == {"w0.txt": 96, "w1.txt": 0}


def test_an_ingested_document_counted_its_chunks_as_it_went_and_measured_the_rate(
    account_a, settings, fake_llm, upload_and_ingest, monkeypatch
):
    """Each staged batch moves chunks_embedded (never backwards, up to the total); the run's
    throughput becomes the rate; once ready, progress is null."""
    settings.CHUNK_SIZE, settings.CHUNK_OVERLAP = 60, 0
    seen = []
    real_stage = ingestion._stage

    def stage_and_look(document, index, result):
        real_stage(document, index, result)
        with account_context(account_id=document.account_id):
            row = Document.objects.for_account(document.account_id).get(pk=document.pk)
        seen.append((row.chunks_embedded, row.chunks_total))

    monkeypatch.setattr(ingestion, "_stage", stage_and_look)
    text = "\n\n".join(f"Rule {i}: requests for leave number {i} go to the team lead first." for i in range(400))
    document = upload_and_ingest(account_a, "rules.txt", text.encode())
    assert document.status == "ready", document.error
    total = document.chunk_count
    assert total > ingestion.BATCH_SIZE  # more than one batch
    assert [t for _, t in seen] == [total] * len(seen) and len(seen) == ingestion._batch_count(total)
    embedded = [e for e, _ in seen]
    assert embedded == sorted(embedded) and embedded[-1] == total and embedded[0] < total
    assert (document.chunks_embedded, document.chunks_total) == (total, total)
    assert progress.measured_rate(document.embedding_model) > 0
    with account_context(account_a):
        assert progress.page_context([document]).progress(document) is None
