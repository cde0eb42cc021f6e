"""A busy or briefly unreachable model server never fails a document: the worker waits out a
slow batch, retries transient errors, then hands the document back to wait in the queue
(saying so, and when it tries again) and takes it again by itself; only a permanent error
fails it. Nothing is embedded twice for nothing, nor charged twice. Driven against the fake
OpenAI server on loopback (llm/fake_server.py): a delay per request, outages of N requests."""

import datetime as dt
import socket

import pytest
from django.utils import timezone

from billing.models import CreditLedgerEntry
from core.tenancy import account_context
from documents.jobs import requeue_stale_work
from documents.models import Document, Status

pytestmark = pytest.mark.django_db

# Two embedding batches (96 chunks a request) at a chunk size of 120 characters.
TWO_BATCHES = "\n\n".join(f"Rule {i}: laptops of team {i} are replaced every {i % 5 + 2} years." for i in range(220))


@pytest.fixture
def busy(settings, fake_llm):
    """The fake server as the provider, the worker's in-job retries quick."""
    settings.EMBEDDING_RETRY_DELAY_SECONDS = 0.0
    settings.EMBEDDING_CONCURRENCY = 1
    return fake_llm


def _due_now(queue, document):
    """Time passes: the document's retry is due, and rq's scheduler moves its job to the queue."""
    with account_context(account_id=document.account_id):
        Document.objects.for_account(document.account_id).filter(pk=document.pk).update(
            retry_at=timezone.now() - dt.timedelta(seconds=1)
        )
    registry = queue.scheduled_job_registry
    moved = 0
    for job_id in registry.get_job_ids():
        job = queue.fetch_job(job_id)
        registry.remove(job)
        queue._enqueue_job(job)
        moved += 1
    return moved


def _embedding_debits(account):
    with account_context(account):
        return list(CreditLedgerEntry.objects.for_account(account).filter(kind="embedding").order_by("pk"))


def test_a_slow_batch_on_a_busy_server_is_waited_for_not_failed(busy, settings, upload_and_ingest, account_a):
    # The server takes longer to answer a batch than a chat call may wait: the worker waits
    # as long as EMBEDDING_TIMEOUT_SECONDS, made for a batch behind others on a busy server.
    busy.delay = 1.5
    settings.LLM_TIMEOUT_SECONDS = 1.0
    settings.EMBEDDING_TIMEOUT_SECONDS = 10.0
    document = upload_and_ingest(account_a, "handbook.txt", b"Laptops are replaced every three years.")
    assert document.status == Status.READY, (document.error_code, document.error)


@pytest.mark.parametrize("outcome", [503, 429, 500, "timeout"])
def test_a_transient_error_is_retried_in_the_job(busy, settings, upload_and_ingest, account_a, outcome):
    settings.EMBEDDING_TIMEOUT_SECONDS = 1.0
    busy.backend.hang_seconds = 2.0
    busy.outage(2, outcome)  # fewer than the job's tries
    document = upload_and_ingest(account_a, "handbook.txt", b"Laptops are replaced every three years.")
    assert document.status == Status.READY, (document.error_code, document.error)
    assert busy.outages_served == 2


@pytest.mark.parametrize(
    "outcome, words",
    [(503, "failed (503)"), (429, "rate limiting"), ("timeout", "did not answer in time")],
)
def test_the_wait_says_what_the_server_did(busy, settings, upload_and_ingest, account_a, outcome, words):
    settings.EMBEDDING_TIMEOUT_SECONDS, settings.EMBEDDING_RETRIES = 0.5, 1
    busy.backend.hang_seconds = 1.0
    busy.outage(1, outcome)
    document = upload_and_ingest(account_a, "handbook.txt", b"Laptops are replaced every three years.")
    assert document.status == Status.PENDING and words in document.wait_message


def test_an_outage_past_the_retries_makes_the_document_wait_then_it_is_ingested_by_itself(
    busy, settings, upload_and_ingest, account_a, queue, run_jobs, client_a
):
    busy.outage(100, 503)
    document = upload_and_ingest(account_a, "handbook.txt", b"Laptops are replaced every three years.")
    # Not failed: back in the queue, saying it waits for the model server and until when.
    assert document.status == Status.PENDING
    assert document.retry_at is not None and document.retry_at > timezone.now()
    shown = client_a.get(f"/api/v1/documents/{document.pk}/").json()
    assert shown["status"] == "pending" and shown["error"] == ""
    assert shown["retry_at"] and "model server" in shown["message"] and "try again" in shown["message"]
    assert shown["waiting_for"] == "model_server"
    page = client_a.get("/documents/").content.decode()
    assert "Waiting for the model server" in page and "try again by itself" in page
    assert not _embedding_debits(account_a)
    # A job is scheduled for when it is due (rq's scheduler), none is queued before.
    assert queue.count == 0 and queue.scheduled_job_registry.count == 1
    busy.recover()
    assert _due_now(queue, document) == 1
    run_jobs()
    with account_context(account_a):
        document.refresh_from_db()
    assert document.status == Status.READY and document.retry_at is None
    assert client_a.get(f"/api/v1/documents/{document.pk}/").json()["message"] == ""
    assert len(_embedding_debits(account_a)) == 1


def test_a_waiting_document_is_not_taken_before_its_time(busy, upload_and_ingest, account_a, run_jobs):
    busy.outage(100, 503)
    document = upload_and_ingest(account_a, "a.txt", b"Laptops are replaced every three years.")
    assert document.status == Status.PENDING
    busy.recover()
    # Another upload's job runs now: it ingests that one and leaves the waiting one alone.
    other = upload_and_ingest(account_a, "b.txt", b"Phones are replaced every two years.")
    assert other.status == Status.READY
    with account_context(account_a):
        document.refresh_from_db()
    assert document.status == Status.PENDING and document.retry_at > timezone.now()


def test_batches_embedded_before_the_outage_are_kept_and_everything_is_charged_once(
    busy, settings, upload_and_ingest, account_a, queue, run_jobs
):
    settings.CHUNK_SIZE, settings.CHUNK_OVERLAP = 120, 0
    busy.outage(100, 503, after=1)  # the first batch embeds, the second meets the outage
    document = upload_and_ingest(account_a, "long.txt", TWO_BATCHES.encode())
    assert document.status == Status.PENDING, (document.error_code, document.error)
    assert document.progress_total == 2 and document.progress_done == 1
    embedded_before = len(busy.requests_to("/v1/embeddings")) - busy.outages_served
    assert embedded_before == 1
    busy.recover()
    busy.clear()
    _due_now(queue, document)
    run_jobs()
    with account_context(account_a):
        document.refresh_from_db()
    assert document.status == Status.READY
    assert len(busy.requests_to("/v1/embeddings")) == 1  # only the batch that was missing
    [debit] = _embedding_debits(account_a)
    assert -debit.delta == document.embedding_tokens == document.credits_charged


def test_each_wait_is_longer_up_to_a_limit(busy, settings, upload_and_ingest, account_a, queue, run_jobs):
    settings.DOCUMENT_PROVIDER_RETRY_SECONDS = 60
    settings.DOCUMENT_PROVIDER_RETRY_MAX_SECONDS = 150
    busy.outage(1000, 503)
    document = upload_and_ingest(account_a, "a.txt", b"Laptops are replaced every three years.")
    waits = []
    for _ in range(4):
        with account_context(account_a):
            document.refresh_from_db()
        assert document.status == Status.PENDING
        waits.append((document.retry_at - document.updated_at).total_seconds())
        _due_now(queue, document)
        run_jobs()
    assert [round(w / 10) * 10 for w in waits] == [60, 120, 150, 150]


@pytest.mark.parametrize("status", [400, 401, 403])
def test_a_permanent_provider_error_fails_the_document(busy, upload_and_ingest, account_a, status):
    busy.outage(1, status)
    document = upload_and_ingest(account_a, "handbook.txt", b"Laptops are replaced every three years.")
    assert document.status == Status.FAILED and document.error_code == "provider_error"
    assert f"({status})" in document.error and document.retry_at is None


def test_a_provider_that_refuses_connections_makes_the_document_wait(settings, upload_and_ingest, account_a, fake_llm):
    settings.EMBEDDING_RETRY_DELAY_SECONDS = 0.0
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings.LLM_BASE_URL = f"http://127.0.0.1:{port}/v1"
    document = upload_and_ingest(account_a, "handbook.txt", b"Laptops are replaced every three years.")
    assert document.status == Status.PENDING and document.retry_at is not None
    assert "could not be reached" in document.wait_message


def _failed_before(account, name, queue, code="provider_unavailable"):
    """A document as the earlier code left it: failed on a transient provider error."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from documents.services import document_upload

    with account_context(account):
        document, _ = document_upload(
            account=account, actor=None, upload=SimpleUploadedFile(name, f"Text of {name}.".encode(), "text/plain")
        )
    queue.empty()
    with account_context(account):
        Document.objects.for_account(account).filter(pk=document.pk).update(
            status=Status.FAILED,
            error_code=code,
            error="The model provider could not be reached. The document was not charged; reindex it to try again.",
        )
    return document


def test_documents_failed_on_a_transient_error_earlier_are_retried_by_the_sweep(
    busy, settings, account_a, account_b, queue, run_jobs, django_capture_on_commit_callbacks
):
    settings.DOCUMENT_TRANSIENT_RETRY_BATCH = 2
    failed = [_failed_before(account_a, f"a{i}.txt", queue) for i in range(2)] + [
        _failed_before(account_b, "b.txt", queue)
    ]
    bad_file = _failed_before(account_a, "bad.txt", queue, code="parse_failed")
    with django_capture_on_commit_callbacks(execute=True):
        retried = requeue_stale_work()
    assert retried == 2  # bounded: a few per sweep
    with django_capture_on_commit_callbacks(execute=True):
        requeue_stale_work()
    run_jobs()
    for document in failed:
        with account_context(account_id=document.account_id):
            document.refresh_from_db()
        assert document.status == Status.READY, (document.error_code, document.error)
    with account_context(account_a):
        bad_file.refresh_from_db()
    assert bad_file.status == Status.FAILED  # a permanent error stays failed
    # Retried once: a sweep after that finds nothing more to retry.
    with django_capture_on_commit_callbacks(execute=True):
        assert requeue_stale_work() == 0


def test_another_account_cannot_see_a_waiting_document(busy, upload_and_ingest, account_a, owner_b, client):
    busy.outage(100, 503)
    document = upload_and_ingest(account_a, "handbook.txt", b"Laptops are replaced every three years.")
    client.force_login(owner_b)
    assert client.get(f"/api/v1/documents/{document.pk}/").status_code == 404
    assert document.pk not in [d["id"] for d in client.get("/api/v1/documents/").json()["results"]]


@pytest.mark.django_db(transaction=True)
def test_a_batch_waiting_past_the_stale_limit_keeps_its_document_claimed(busy, settings, upload_and_ingest, account_a):
    # The sweeper takes a document whose heartbeat is older than DOCUMENT_STALE_SECONDS for
    # one whose worker died: a batch waiting on a busy server must not look like that (a
    # second worker would embed the same document beside the first, on the same busy cores).
    import threading
    import time

    from django.db import connection

    settings.DOCUMENT_STALE_SECONDS = 2
    settings.EMBEDDING_TIMEOUT_SECONDS = 30
    busy.delay = 5.0
    swept = []

    def sweep_meanwhile():
        time.sleep(3.5)
        try:
            swept.append(requeue_stale_work())
        finally:
            connection.close()

    sweeper = threading.Thread(target=sweep_meanwhile)
    sweeper.start()
    document = upload_and_ingest(account_a, "handbook.txt", b"Laptops are replaced every three years.")
    sweeper.join()
    assert document.status == Status.READY
    assert swept == [0]
    assert len(busy.requests_to("/v1/embeddings")) == 1


def test_five_files_dropped_at_once_on_a_flaky_busy_server_all_end_ready(
    busy, settings, account_a, client_a, queue, run_jobs, django_capture_on_commit_callbacks
):
    """The drop that failed two of five documents: a 26-page PDF (a real manual), HTML, DOCX,
    XLSX and PPTX at once, the model server slow and failing requests for a while (503s, then
    requests it holds past the worker's timeout). Every one ends ready, each charged once, and
    a question asked between the worker's rounds is answered."""
    from pathlib import Path

    from django.core.files.uploadedfile import SimpleUploadedFile

    from billing.services import credits_grant
    from documents.services import document_upload
    from documents.tests.office_files import make_docx_bytes, make_pptx, make_xlsx

    with account_context(account_a):
        credits_grant(account=account_a, amount=100_000, reason="the manual's embeddings")
    settings.EMBEDDING_RETRIES, settings.EMBEDDING_TIMEOUT_SECONDS = 2, 0.5
    busy.backend.hang_seconds = 1.0
    busy.delay = 0.05
    busy.outage(3, 503, after=1)
    busy.outage(3, "timeout")
    files = [
        ("manual.pdf", (Path(__file__).parent / "fixtures" / "camlidl-manual.pdf").read_bytes(), "application/pdf"),
        (
            "chapter.html",
            b"<html><body><h1>Laptops</h1><p>Laptops are replaced every three years.</p></body></html>",
            "text/html",
        ),
        ("policy.docx", make_docx_bytes(), "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
        ("budget.xlsx", make_xlsx(), "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
        ("deck.pptx", make_pptx(), "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
    ]
    ids = []
    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        for name, data, content_type in files:
            document, _ = document_upload(
                account=account_a, actor=None, upload=SimpleUploadedFile(name, data, content_type=content_type)
            )
            ids.append(document.pk)
    answered = None
    for _ in range(6):
        run_jobs()
        if answered is None:  # a question meanwhile, between the worker's rounds
            answered = client_a.post(
                "/api/v1/chat/", {"message": "How often are laptops replaced?"}, content_type="application/json"
            )
        with account_context(account_a):
            waiting = list(Document.objects.for_account(account_a).filter(pk__in=ids).exclude(status=Status.READY))
        if not waiting:
            break
        assert all(d.status == Status.PENDING and d.retry_at for d in waiting), [
            (d.name, d.status, d.error, d.retry_at, d.attempts) for d in waiting
        ]
        for document in waiting:
            _due_now(queue, document)
    with account_context(account_a):
        statuses = dict(Document.objects.for_account(account_a).filter(pk__in=ids).values_list("name", "status"))
    assert statuses == {name: Status.READY for name, _, _ in files}
    assert busy.outages_served == 6
    # One debit per document (the chat question's embedding is charged as a search).
    debits = [e.reference for e in _embedding_debits(account_a) if e.reference != "search"]
    assert len(debits) == len(set(debits)) == 5
    assert answered.status_code == 200, answered.content


def test_a_slow_document_is_handed_on_before_its_job_runs_out_of_time(
    busy, settings, upload_and_ingest, account_a, monkeypatch
):
    # rq kills a job at its timeout, and a document whose job was killed three times ends
    # failed ("processing stopped unexpectedly"): on a slow server the job hands the document
    # on, with the batches done so far, before its time is up, and a new job carries on at once.
    from documents import ingestion

    settings.CHUNK_SIZE, settings.CHUNK_OVERLAP = 120, 0
    settings.EMBEDDING_TIMEOUT_SECONDS = 5.0
    # The job may submit a batch for 1 s: the first batch takes longer than that.
    monkeypatch.setattr(ingestion, "INGEST_JOB_TIMEOUT", 5.0 + ingestion.JOB_MARGIN_SECONDS + 1.0)
    busy.delay = 1.5
    document = upload_and_ingest(account_a, "long.txt", TWO_BATCHES.encode())
    assert document.status == Status.READY, (document.error_code, document.error)
    assert document.attempts <= 1  # being handed on is no crash
    assert len(busy.requests_to("/v1/embeddings")) == 2  # each batch embedded once
    assert len(_embedding_debits(account_a)) == 1
