"""Fair ingestion: one account's backlog never starves another.

Real rq workers (subprocesses, `rqworker --burst`), the real Redis queue and PostgreSQL:
account A queues a backlog, the workers take some of it, then account B uploads one small
document. B's document must be ready before everything of A's backlog except the jobs the
workers had already taken when B uploaded. The order is the order of completion (the
documents' publish times), never a wall-clock bound.
"""

import threading

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from billing.models import CreditLedgerEntry
from billing.services import credits_grant
from core.tenancy import account_context
from documents.models import Document
from documents.services import document_upload
from documents.tests.test_worker_crash import _worker, _worker_env
from llm.fake_server import FakeBackend, FakeOpenAIServer

BACKLOG = 6


class HoldFirstEmbeddings(FakeBackend):
    """Holds the first `held` embedding requests (one per worker: each small document is one
    request) until released, so the test knows which jobs were taken before B uploads."""

    def __init__(self, held: int):
        super().__init__()
        self.held = held
        self.calls = 0
        self.all_held = threading.Event()
        self.release = threading.Event()
        self._count_lock = threading.Lock()

    def embeddings(self, body, texts):
        with self._count_lock:
            self.calls += 1
            hold = self.calls <= self.held
            if self.calls == self.held:
                self.all_held.set()
        if hold:
            self.release.wait(120)
        return super().embeddings(body, texts)


def _upload(account, name: str, text: str) -> Document:
    with account_context(account):
        document, created = document_upload(
            account=account, actor=None, upload=SimpleUploadedFile(name, text.encode(), content_type="text/plain")
        )
    assert created
    return document


def _ready_order(*accounts) -> list[tuple[int, int]]:
    """(account id, document id) of every document, in the order they became ready."""
    rows = []
    for account in accounts:
        with account_context(account):
            rows += list(
                Document.objects.for_account(account).values_list("heartbeat_at", "account_id", "pk", "status")
            )
    assert all(status == "ready" for *_, status in rows), rows
    return [(account_id, pk) for _, account_id, pk, _ in sorted(rows)]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("workers", [1, 2])
def test_a_small_document_waits_only_for_the_jobs_already_taken(account_a, account_b, queue, workers):
    server = FakeOpenAIServer()
    server.backend = backend = HoldFirstEmbeddings(held=workers)
    with server:
        for account in (account_a, account_b):
            with account_context(account):
                credits_grant(account=account, amount=100_000, reason="fairness test")
        backlog = [
            _upload(account_a, f"a-{i}.txt", f"Backlog document {i} of account A about topic {i}.")
            for i in range(BACKLOG)
        ]
        env = _worker_env(server.base_url)
        processes = [_worker(env) for _ in range(workers)]
        try:
            # Each worker has taken one of A's documents and is embedding it.
            assert backend.all_held.wait(90), [p.poll() for p in processes]
            small = _upload(account_b, "b.txt", "A 36-byte text file from account B.")
            backend.release.set()
            outputs = [p.communicate(timeout=180)[0] for p in processes]
        finally:
            backend.release.set()
            for process in processes:
                if process.poll() is None:
                    process.kill()
        assert all(p.returncode == 0 for p in processes), outputs

    order = _ready_order(account_a, account_b)
    assert len(order) == BACKLOG + 1
    position = order.index((account_b.pk, small.pk))
    # Before B's: the documents the workers were already embedding and, with several
    # workers, those the others took alongside B's (completion order among parallel jobs
    # is a race). Never the rest of A's backlog.
    assert position <= 2 * workers - 1, (position, order)
    # Everything of A's was still processed, each document once, charged once.
    assert {pk for account_id, pk in order if account_id == account_a.pk} == {d.pk for d in backlog}
    with account_context(account_a):
        assert CreditLedgerEntry.objects.for_account(account_a).filter(kind="embedding").count() == BACKLOG
        assert set(Document.objects.for_account(account_a).values_list("attempts", flat=True)) == {1}


# --- the fair claim, one job at a time (in this process: rq's job function, real queue) ---


@pytest.fixture
def queued(django_capture_on_commit_callbacks, queue):
    """Upload without running the queue; returns the document (its job is in the queue)."""

    def go(account, name: str, text: str, collection=None) -> Document:
        with account_context(account), django_capture_on_commit_callbacks(execute=True):
            document, _ = document_upload(
                account=account,
                actor=None,
                collection=collection,
                upload=SimpleUploadedFile(name, text.encode(), content_type="text/plain"),
            )
        return document

    return go


def _status(account, document) -> str:
    with account_context(account):
        return Document.objects.for_account(account).get(pk=document.pk).status


def _next_job():
    from documents.jobs import ingest_next_document

    ingest_next_document()


def test_accounts_take_turns(account_a, account_b, fake_llm, queued, queue):
    flood = [queued(account_a, f"a{i}.txt", f"Account A's document number {i}.") for i in range(3)]
    small = queued(account_b, "b.txt", "Account B's one small document.")
    assert queue.count == 4  # one job per document, whichever document each takes
    _next_job()  # nobody served yet: the oldest pending document
    assert _status(account_a, flood[0]) == "ready" and _status(account_b, small) == "pending"
    _next_job()  # A was just served: B's turn, although A queued first
    assert _status(account_b, small) == "ready"
    assert [_status(account_a, d) for d in flood] == ["ready", "pending", "pending"]
    _next_job()
    _next_job()
    assert [_status(account_a, d) for d in flood] == ["ready", "ready", "ready"]
    _next_job()  # a job with nothing left to claim returns quietly
    # Each account paid for its own documents only, and sees only its own.
    for account, documents in ((account_a, flood), (account_b, [small])):
        with account_context(account):
            refs = set(
                CreditLedgerEntry.objects.for_account(account)
                .filter(kind="embedding")
                .values_list("idempotency_key", flat=True)
            )
            assert refs == {f"ingest:{d.pk}:1" for d in documents}
            assert set(Document.objects.for_account(account).values_list("pk", flat=True)) == {d.pk for d in documents}


def test_an_account_with_a_document_in_flight_waits_for_one_without(account_a, account_b, fake_llm, queued):
    from documents.ingestion_queue import claim_next

    first, second = (queued(account_a, f"a{i}.txt", f"Account A's document {i}.") for i in range(2))
    other = queued(account_b, "b.txt", "Account B's document.")
    assert claim_next().pk == first.pk  # now in flight (processing, fresh heartbeat)
    assert claim_next().pk == other.pk  # not A's second: A has one in flight, B none
    assert claim_next().pk == second.pk
    assert claim_next() is None


def test_a_document_is_ingested_once_however_many_jobs_run(
    account_a, fake_llm, queued, run_jobs, django_capture_on_commit_callbacks
):
    from documents.jobs import enqueue_ingest

    document = queued(account_a, "once.txt", "One document, three jobs.")
    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        enqueue_ingest(document)  # (a re-queued job, a retry: more jobs than documents)
        enqueue_ingest(document)
    assert run_jobs() == 3
    with account_context(account_a):
        done = Document.objects.for_account(account_a).get(pk=document.pk)
        assert done.status == "ready" and done.attempts == 1
        assert CreditLedgerEntry.objects.for_account(account_a).filter(kind="embedding").count() == 1


def test_deleted_and_cancelled_documents_are_not_taken(
    account_a, fake_llm, queued, run_jobs, django_capture_on_commit_callbacks
):
    from documents import services

    deleted = queued(account_a, "deleted.txt", "This one is deleted before a worker takes it.")
    cancelled = queued(account_a, "cancelled.txt", "This one is cancelled before a worker takes it.")
    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        services.document_delete(account=account_a, document=deleted)
        services.document_reindex_cancel(account=account_a, document=cancelled)
    run_jobs()
    with account_context(account_a):
        assert not Document.objects.for_account(account_a).filter(pk=deleted.pk).exists()
        assert Document.objects.for_account(account_a).get(pk=cancelled.pk).error_code == "cancelled"
        assert not CreditLedgerEntry.objects.for_account(account_a).filter(kind="embedding").exists()


def test_a_document_in_a_restricted_collection_is_ingested(account_a, owner_a, fake_llm, queued, run_jobs):
    from documents.services import collection_create

    with account_context(account_a):
        private = collection_create(account=account_a, actor=owner_a, name="Board", restricted=True)
    document = queued(account_a, "minutes.txt", "Board minutes nobody else may read.", collection=private)
    run_jobs()
    assert _status(account_a, document) == "ready"


def test_a_reindex_runs_document_is_left_to_the_run(account_a, owner_a, fake_llm, queued, run_jobs):
    from documents.ingestion import _bump_revision, reindex_run
    from documents.ingestion_queue import claim_next
    from documents.models import ReindexRun
    from documents.services import account_reindex_start

    document = queued(account_a, "run.txt", "A document an account reindex is at.")
    run_jobs()
    with account_context(account_a):
        run = account_reindex_start(account=account_a, actor=owner_a)
        # The run has given the document its new revision and is about to claim it itself.
        revision = _bump_revision(account_a.pk, document.pk)
        ReindexRun.objects.for_account(account_a).filter(pk=run.pk).update(
            current_document_id=document.pk, current_revision=revision
        )
    assert claim_next() is None  # a fair job does not take it from the run
    reindex_run(account_id=account_a.pk, run_id=run.pk)
    with account_context(account_a):
        done = Document.objects.for_account(account_a).get(pk=document.pk)
        assert done.status == "ready" and done.revision == 2 and done.attempts == 1


# --- the lanes (documents.models.IngestionLane): the claim's order, kept by the database ---


def _lane(account) -> dict | None:
    from documents.models import IngestionLane

    with account_context(account):
        return IngestionLane.objects.for_account(account).values("waiting", "waiting_since", "served_at").first()


def test_a_pending_document_marks_its_lane_waiting_and_a_claim_with_nothing_left_marks_it_idle(
    account_a, account_b, owner_a, fake_llm, queued, django_capture_on_commit_callbacks
):
    from core.tenancy import dangerously_bypass_tenancy
    from documents.ingestion_queue import claim_next
    from documents.models import IngestionLane
    from documents.services import document_reindex

    assert _lane(account_a) is None
    document = queued(account_a, "a.txt", "Account A's document.")
    lane = _lane(account_a)
    assert lane["waiting"] and lane["waiting_since"] and lane["served_at"] is None
    # The trigger wrote the lane under the document's row-level security: B sees no lane.
    assert _lane(account_b) is None
    with account_context(account_b):
        assert not IngestionLane.all_accounts.exists()
    with dangerously_bypass_tenancy(reason="test: every lane"):
        assert list(IngestionLane.all_accounts.values_list("account_id", flat=True)) == [account_a.pk]

    assert claim_next().pk == document.pk
    lane = _lane(account_a)
    assert lane["waiting"] and lane["served_at"] is not None  # idle only once a claim finds nothing
    assert claim_next() is None
    assert _lane(account_a) == {"waiting": False, "waiting_since": None, "served_at": lane["served_at"]}
    # Any way back to pending marks it again: here a reindex of the document in flight.
    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        document_reindex(account=account_a, document=document)
    assert _lane(account_a)["waiting"]
    assert claim_next().pk == document.pk


def test_the_fairest_lanes_are_read_in_the_index_order(db):
    """The claim's order among idle accounts is the partial index's, so the claim reads a
    few index entries however many accounts wait (no sort of every waiting lane)."""
    from django.db import connection

    from core.tenancy import dangerously_bypass_tenancy
    from documents.ingestion_queue import QUEUE

    with dangerously_bypass_tenancy(reason="test: the claim's plan"), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + QUEUE.idle_lanes_sql, {"skip": [1, 2], "limit": 32})
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "ingestion_lane_fairest" in plan and "Sort" not in plan, plan


def test_the_fair_order_holds_across_many_waiting_accounts(db, fake_llm, queued):
    """Never served first, in the order they started waiting (here the reverse of the accounts'
    ids, so the id is not what orders them); then, all with one in flight, least recently
    served first. (An account with nothing in flight before one with some: the test above.)"""
    from accounts.tests.factories import make_account
    from documents.ingestion_queue import claim_next

    accounts = [make_account(f"Lane {i}", owner_email=f"lane{i}@lanes.test") for i in range(5)]
    waiting_order = accounts[::-1]
    for account in waiting_order:
        for n in range(2):
            queued(account, f"{account.pk}-{n}.txt", f"Account {account.pk}'s document {n}.")
    first_round = [claim_next().account_id for _ in accounts]
    assert first_round == [a.pk for a in waiting_order]
    assert [claim_next().account_id for _ in accounts] == first_round
    assert claim_next() is None


@pytest.mark.django_db(transaction=True)
def test_a_document_that_becomes_pending_while_a_claim_marks_the_lane_idle_keeps_it_waiting(
    account_a, fake_llm, queued
):
    """The lost wake-up: a claim finds nothing pending and marks the lane idle while an upload
    of the same account is committing. The upload's trigger waits for the claim's lane lock
    and marks the lane waiting after it, so the new document is taken."""
    from django.db import connection, connections

    from core.tenancy import dangerously_bypass_tenancy
    from documents.ingestion_queue import QUEUE, claim_next

    first = queued(account_a, "first.txt", "The document taken first.")
    assert claim_next().pk == first.pk  # the lane still waits; nothing else is pending
    locked, go_on = threading.Event(), threading.Event()
    errors: list = []

    def claimer():
        try:
            with dangerously_bypass_tenancy(reason="test: a claim holding the lane"), connection.cursor() as cursor:
                cursor.execute(QUEUE.lock_lane_sql, [account_a.pk])
                assert cursor.fetchone() is not None
                locked.set()
                assert go_on.wait(60)
                cursor.execute(QUEUE.idle_sql, QUEUE.idle_params(account_a.pk))
                assert cursor.rowcount == 1  # it saw nothing pending: the upload is not committed
        except Exception as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            connections.close_all()

    uploaded: list = []

    def uploader():
        try:
            uploaded.append(_upload(account_a, "second.txt", "The document uploaded meanwhile."))
        except Exception as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    claim_thread = threading.Thread(target=claimer)
    claim_thread.start()
    assert locked.wait(60)
    upload_thread = threading.Thread(target=uploader)
    upload_thread.start()
    # The upload's trigger is waiting for the claim's lane lock (a lock wait, seen from here).
    with connection.cursor() as cursor:
        for _ in range(600):
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database() AND query LIKE 'INSERT INTO \"documents_document\"%%'"
            )
            if cursor.fetchone()[0]:
                break
            threading.Event().wait(0.05)
        else:
            pytest.fail("the upload never waited for the lane")
    go_on.set()
    claim_thread.join(60)
    upload_thread.join(60)
    assert not errors, errors
    assert _lane(account_a)["waiting"]
    assert claim_next().pk == uploaded[0].pk


def test_the_sweeper_marks_waiting_a_lane_left_idle_with_a_document_pending(account_a, fake_llm, queued, queue):
    """The safety net for a lane the trigger could not keep right (a reindex run that stopped
    while its document was pending: that document kept no lane waiting)."""
    import datetime as dt

    from django.utils import timezone

    from core.tenancy import dangerously_bypass_tenancy
    from documents.ingestion_queue import claim_next
    from documents.jobs import requeue_stale_work
    from documents.models import IngestionLane

    document = queued(account_a, "left.txt", "A document whose lane was left idle.")
    long_ago = timezone.now() - dt.timedelta(hours=1)
    with dangerously_bypass_tenancy(reason="test: a lane left idle"):
        IngestionLane.all_accounts.filter(account_id=account_a.pk).update(waiting=False, waiting_since=None)
        Document.all_accounts.filter(pk=document.pk).update(created_at=long_ago)
    assert claim_next() is None  # not waiting: not found
    requeue_stale_work()
    assert _lane(account_a)["waiting"]
    assert claim_next().pk == document.pk
