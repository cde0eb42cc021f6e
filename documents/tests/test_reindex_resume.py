"""Reindex that resumes and cancels: a real rq worker killed (SIGKILL)
mid-reindex of an account is re-queued by the sweeper and finishes with exactly one charge
for the reindex; a single document's reindex and an account run can be cancelled between
embedding batches; progress moves per batch."""

import datetime as dt
import threading
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection

from billing.models import CreditLedgerEntry
from billing.services import credits_grant
from core.tenancy import account_context
from documents import services
from documents.ingestion import ingest
from documents.jobs import requeue_stale_work
from documents.models import Chunk, Document, EmbeddingBatch, ReindexRun
from documents.services import document_upload
from documents.tests.test_worker_crash import _kill_worker_and_horse, _worker, _worker_env
from llm.fake_server import FakeBackend, FakeOpenAIServer

LONG = "\n\n".join(
    f"Paragraph {i} talks about topic {i} in words that fill the chunk. " * 9 for i in range(300)
).encode()  # three or more embedding batches


class Gate(FakeBackend):
    """Embeds freely until armed; then answers the first request and holds the second until
    released (or runs `on_second` there)."""

    def __init__(self, on_second=None):
        super().__init__()
        self.armed = False
        self.calls = 0
        self.second_started = threading.Event()
        self.release = threading.Event()
        self.on_second = on_second

    def embeddings(self, body, texts):
        if self.armed:
            self.calls += 1
            if self.calls == 2:
                self.second_started.set()
                if self.on_second:
                    self.on_second()
                else:
                    self.release.wait(60)
        return super().embeddings(body, texts)


def _doc(account, pk):
    with account_context(account):
        return Document.objects.for_account(account).get(pk=pk)


def _charges(account, document):
    with account_context(account):
        return list(
            CreditLedgerEntry.objects.for_account(account)
            .filter(kind="embedding", idempotency_key__startswith=f"ingest:{document.pk}:")
            .values_list("idempotency_key", "tokens")
        )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_mid_reindex_resumes_and_charges_once(account_a, owner_a, queue):
    server = FakeOpenAIServer()
    server.backend = backend = Gate()
    with server:
        env = _worker_env(server.base_url)
        with account_context(account_a):
            credits_grant(account=account_a, amount=1_000_000, reason="reindex")
            document, _ = document_upload(
                account=account_a, actor=None, upload=SimpleUploadedFile("long.txt", LONG, content_type="text/plain")
            )
        first_ingest = _worker(env)
        assert first_ingest.wait(120) == 0, first_ingest.communicate()[0]
        ingested = _doc(account_a, document.pk)
        assert ingested.status == "ready" and ingested.progress_total >= 3

        backend.armed = True
        with account_context(account_a):
            run = services.account_reindex_start(account=account_a, actor=owner_a)
        worker = _worker(env)
        deadline = time.monotonic() + 90
        while not backend.second_started.wait(0.2) and worker.poll() is None and time.monotonic() < deadline:
            pass
        assert backend.second_started.is_set(), worker.communicate(timeout=10)[0]
        while _doc(account_a, document.pk).progress_done < 1 and time.monotonic() < deadline:
            time.sleep(0.1)  # the first batch is staged while the second is embedded
        _kill_worker_and_horse(worker)
        worker.wait(10)
        backend.release.set()

        crashed = _doc(account_a, document.pk)
        assert (crashed.status, crashed.revision, crashed.progress_done) == ("processing", 2, 1)
        with account_context(account_a):
            assert ReindexRun.objects.for_account(account_a).get(pk=run.pk).current_revision == 2
            stale = crashed.created_at - dt.timedelta(hours=1)
            Document.objects.for_account(account_a).filter(pk=document.pk).update(heartbeat_at=stale)
            ReindexRun.objects.for_account(account_a).filter(pk=run.pk).update(heartbeat_at=stale)
        assert requeue_stale_work() == 2  # the document and the run
        second = _worker(env)
        output, _ = second.communicate(timeout=180)
        assert second.returncode == 0, output

    done = _doc(account_a, document.pk)
    assert done.status == "ready" and done.revision == 2, (done.status, done.error, output)
    with account_context(account_a):
        run = ReindexRun.objects.for_account(account_a).get(pk=run.pk)
        chunks = list(Chunk.objects.for_account(account_a).filter(document=done).values_list("revision", flat=True))
    assert run.status == "done" and run.done == 1
    assert set(chunks) == {2} and len(chunks) == done.chunk_count
    # Exactly one charge for the reindex (and one for the first ingestion), of the same size.
    charges = dict(_charges(account_a, document))
    assert set(charges) == {f"ingest:{document.pk}:1", f"ingest:{document.pk}:2"}
    assert charges[f"ingest:{document.pk}:2"] == charges[f"ingest:{document.pk}:1"] == done.embedding_tokens


@pytest.fixture
def long_document(account_a, fake_llm, upload_and_ingest):
    with account_context(account_a):
        credits_grant(account=account_a, amount=1_000_000, reason="reindex")
    document = upload_and_ingest(account_a, "long.txt", LONG)
    assert document.status == "ready" and document.progress_total >= 3
    return document


class Calls:
    n = 0


def _cancel_on_second_batch(fake_llm, cancel, monkeypatch):
    """The provider's second embedding request cancels (on a connection of its own, as a
    person clicking Cancel while the worker embeds)."""
    calls, real = Calls(), fake_llm.backend.embeddings

    def embeddings(body, texts):
        calls.n += 1
        if calls.n == 2:
            try:
                cancel()
            finally:
                connection.close()
        return real(body, texts)

    monkeypatch.setattr(fake_llm.backend, "embeddings", embeddings)
    return calls


@pytest.mark.django_db(transaction=True)
def test_a_single_documents_reindex_is_cancelled_between_batches(
    account_a, long_document, fake_llm, settings, monkeypatch
):
    settings.EMBEDDING_CONCURRENCY = 1
    with account_context(account_a):
        before = set(Chunk.objects.for_account(account_a).filter(document=long_document).values_list("pk", flat=True))
        document = services.document_reindex(account=account_a, document=long_document)

    def cancel():
        with account_context(account_a):
            services.document_reindex_cancel(account=account_a, document=document)

    gate = _cancel_on_second_batch(fake_llm, cancel, monkeypatch)
    ingest(account_id=account_a.pk, document_id=document.pk, revision=document.revision)

    after = _doc(account_a, document.pk)
    assert after.status == "ready" and after.error == ""
    assert gate.n == 2  # the later batches were never embedded
    with account_context(account_a):
        assert set(Chunk.objects.for_account(account_a).filter(document=after).values_list("pk", flat=True)) == before
        assert not EmbeddingBatch.objects.for_account(account_a).filter(document=after).exists()
    assert [k for k, _t in _charges(account_a, after)] == [f"ingest:{after.pk}:1"]  # nothing for the cancelled one
    # Search still finds the document's (previous) chunks.
    assert after.chunk_count == len(before)


@pytest.mark.django_db(transaction=True)
def test_an_account_run_is_cancelled_mid_document(
    account_a, owner_a, long_document, fake_llm, settings, upload_and_ingest, monkeypatch
):
    settings.EMBEDDING_CONCURRENCY = 1
    second = upload_and_ingest(account_a, "second.txt", b"A second document about the coffee machine.")
    with account_context(account_a):
        run = services.account_reindex_start(account=account_a, actor=owner_a)
    queue_jobs = run  # the run's job was queued on commit; it is run here, in this process

    def cancel():
        with account_context(account_a):
            services.account_reindex_cancel(account=account_a, run=run)

    gate = _cancel_on_second_batch(fake_llm, cancel, monkeypatch)
    from documents.ingestion import reindex_run

    reindex_run(account_id=account_a.pk, run_id=queue_jobs.pk)

    with account_context(account_a):
        run = ReindexRun.objects.for_account(account_a).get(pk=run.pk)
    assert run.status == "cancelled" and run.done == 0
    assert gate.n == 2
    first, other = _doc(account_a, long_document.pk), _doc(account_a, second.pk)
    assert first.status == "ready" and first.revision == 2  # back to its chunks of revision 1
    assert other.status == "ready" and other.revision == 1  # never started
    assert [k for k, _t in _charges(account_a, first)] == [f"ingest:{first.pk}:1"]


@pytest.mark.django_db(transaction=True)
def test_progress_moves_per_embedding_batch(account_a, long_document, fake_llm, settings, monkeypatch):
    """A document of N batches reports 0/N, 1/N, ... N/N (not 0 then done)."""
    settings.EMBEDDING_CONCURRENCY = 1
    seen = []

    real = fake_llm.backend.embeddings

    def embeddings(body, texts):
        try:
            seen.append(_doc(account_a, long_document.pk).progress_done)
        finally:
            connection.close()
        return real(body, texts)

    with account_context(account_a):
        document = services.document_reindex(account=account_a, document=long_document)
    monkeypatch.setattr(fake_llm.backend, "embeddings", embeddings)
    ingest(account_id=account_a.pk, document_id=document.pk, revision=document.revision)
    done = _doc(account_a, document.pk)
    total = done.progress_total
    assert total >= 3 and seen == list(range(total)) and done.progress_done == total


def test_cancel_surfaces_and_isolation(
    account_a, account_b, owner_a, long_document, client, settings, django_capture_on_commit_callbacks
):
    """The page button and POST /api/v1/documents/<id>/reindex/cancel/; another account's
    owner gets 404 and changes nothing; a viewer may not."""
    from accounts.tests.factories import add_member

    with account_context(account_a), django_capture_on_commit_callbacks(execute=False):
        services.document_reindex(account=account_a, document=long_document)
    client.force_login(owner_a)
    assert b"reindex/cancel/" in client.get(f"/documents/{long_document.pk}/").content
    client.force_login(account_b.test_owner)
    assert client.post(f"/documents/{long_document.pk}/reindex/cancel/").status_code == 404
    assert client.post(f"/api/v1/documents/{long_document.pk}/reindex/cancel/").status_code == 404
    viewer = add_member(account_a, role="viewer")
    client.force_login(viewer)
    assert client.post(f"/documents/{long_document.pk}/reindex/cancel/").status_code == 403
    assert _doc(account_a, long_document.pk).status == "pending"
    client.force_login(owner_a)
    response = client.post(f"/api/v1/documents/{long_document.pk}/reindex/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "ready"
    assert client.post(f"/documents/{long_document.pk}/reindex/cancel/").status_code == 302  # nothing left: fine
