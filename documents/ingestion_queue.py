"""Fair ingestion: which pending document a free worker takes next, by
the fair-queue rule (core/fair_queue.py): the oldest pending document of the account with the
fewest documents in flight, then never or least recently served (its last fair claim), then
waiting longest. Every upload (reindex, retry, sweep) enqueues the same job, "ingest the next
document, fairly", and the job claims a document from PostgreSQL when it starts, so a small
document from account B waits at most for the jobs already running, whatever account A has
queued, and the queue holds as many jobs as there are documents to ingest.

Each account has a lane (documents.models.IngestionLane): a trigger marks it waiting when a
document becomes pending, the claim marks it idle when nothing is left.

Durable: the pending documents are the queue; a lost job is made up by the sweeper
(documents.jobs.requeue_stale_work), and a job that finds nothing to claim returns quietly.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.db.models import Q
from django.utils import timezone

from core.fair_queue import FairQueue
from core.tenancy import account_context, dangerously_bypass_tenancy
from documents import ingestion
from documents.models import Document, ReindexRun, Status

logger = logging.getLogger("groundwork.documents")

# The job id of every "ingest the next document" job starts with this, so the sweeper counts
# them from the queue's list of ids alone (no job is loaded: docs/benchmarks.md, "Ingestion
# fairness"). A retry keeps its job's id.
INGESTION_JOB_PREFIX = ingestion.INGESTION_JOB_PREFIX

# Accounts with documents in flight, and how many: a document a worker holds (fresh heartbeat).
# Bounded by the number of workers, and read through the (status) index.
_BUSY_SQL = """
SELECT account_id, count(*) FROM documents_document
WHERE status = %(processing)s AND heartbeat_at >= %(fresh)s GROUP BY account_id
"""

# A running reindex run's current document is the run's, so it keeps no lane waiting (the
# sweeper marks the lane again if the run stops and leaves it pending).
_WAITING_SQL = """
    SELECT 1 FROM documents_document AS d
    WHERE d.account_id = %(account)s AND d.status = %(pending)s AND NOT EXISTS (
        SELECT 1 FROM documents_reindexrun AS r
        WHERE r.account_id = d.account_id AND r.status = %(running)s AND r.current_document_id = d.id)
"""

QUEUE = FairQueue(
    item="document",
    logger="groundwork.documents",
    lanes="documents_ingestionlane",
    lock=0x67776E6471,  # "gwndq": one claim at a time across every worker
    job_prefix=INGESTION_JOB_PREFIX,
    waiting_sql=_WAITING_SQL,
    waiting_params={"pending": Status.PENDING, "running": ReindexRun.RunStatus.RUNNING},
)

# The sweeper's safety net: lanes of accounts with documents pending past the stale limit
# that are not marked waiting (a running reindex run that stopped with its document pending).
_MARK_STALE_WAITING_SQL = """
INSERT INTO documents_ingestionlane AS lane (account_id, waiting, waiting_since)
SELECT DISTINCT d.account_id, true, clock_timestamp() FROM documents_document AS d
WHERE d.status = %(pending)s AND coalesce(d.heartbeat_at, d.created_at) < %(stale_before)s
  AND NOT EXISTS (SELECT 1 FROM documents_reindexrun AS r
                  WHERE r.account_id = d.account_id AND r.status = %(running)s AND r.current_document_id = d.id)
ON CONFLICT (account_id) DO UPDATE SET waiting = true, waiting_since = clock_timestamp() WHERE NOT lane.waiting
RETURNING account_id
"""


def ingest_next() -> int | None:
    """Claim the next document fairly and ingest it. Returns its id (None: nothing pending)."""
    document = claim_next()
    if document is None:
        return None
    try:
        ingestion.process(document)
    except (OperationalError, InterfaceError):
        # The database went away mid-document (ingestion re-raises these for rq's retry).
        # A retry of this job claims afresh, so hand the document back for it (or any job)
        # to take, with the batches staged so far; if the database is still unreachable,
        # the sweeper hands it back once its heartbeat is stale.
        _release(document)
        raise
    return document.pk


def _release(document: Document) -> None:
    try:
        connection.close_if_unusable_or_obsolete()
        with account_context(account_id=document.account_id):
            Document.objects.for_account(document.account_id).filter(
                pk=document.pk, revision=document.revision, status=Status.PROCESSING
            ).update(status=Status.PENDING)
    except DatabaseError:
        logger.warning("could not hand document %s back after a database error; the sweeper will", document.pk)


def claim_next() -> Document | None:
    """Mark the fairest pending document `processing` and return it (None: nothing to take),
    by the fair-queue rule (core/fair_queue.py).

    NOTE: the document row is locked FOR UPDATE SKIP LOCKED besides the queue's claim lock,
    so a document is claimed by one job only; a run of the same document's reindex (which
    claims through ingestion._claim, under the same row lock) cannot take it at the same
    moment either.
    """
    fresh = timezone.now() - dt.timedelta(seconds=settings.DOCUMENT_STALE_SECONDS)
    with dangerously_bypass_tenancy(reason="ingestion: claim the next document fairly across accounts"):
        with connection.cursor() as cursor:
            return QUEUE.claim(
                cursor, busy_sql=_BUSY_SQL, busy_params={"processing": Status.PROCESSING, "fresh": fresh}, take=_take
            )


def _take(account_id: int) -> Document | None:
    """The account's oldest pending document, claimed (None: none can be taken now)."""
    tried: set[int] = set()
    while (candidate := _oldest_pending(account_id, exclude=tried)) is not None:
        tried.add(candidate.pk)
        # The claim itself is the pipeline's (attempts, heartbeat, a document that
        # crashed too often fails there), in the document's account context.
        document = ingestion.claim(account_id, candidate.pk, candidate.revision)
        if document is not None:
            return document
    return None


def mark_stale_waiting(stale_before) -> list[int]:
    """The sweeper's safety net (documents.jobs.requeue_stale_work): mark waiting the lanes of
    accounts whose documents have been pending since before `stale_before` without their lane
    saying so. Returns those accounts (normally none). Runs inside the sweeper's bypass."""
    with connection.cursor() as cursor:
        cursor.execute(
            _MARK_STALE_WAITING_SQL,
            {"pending": Status.PENDING, "stale_before": stale_before, "running": ReindexRun.RunStatus.RUNNING},
        )
        return [row[0] for row in cursor.fetchall()]


def _oldest_pending(account_id: int, *, exclude: set[int]) -> Document | None:
    """The account's oldest pending document that may be taken now: not one waiting for the
    model server until its `retry_at` (its lane keeps waiting, and a job is scheduled then)."""
    running_runs = ReindexRun.all_accounts.filter(
        account_id=account_id, status=ReindexRun.RunStatus.RUNNING, current_document_id__isnull=False
    )
    return (
        Document.all_accounts.select_for_update(skip_locked=True, of=("self",))
        .filter(account_id=account_id, status=Status.PENDING)
        .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=timezone.now()))
        .exclude(pk__in=running_runs.values("current_document_id"))
        .exclude(pk__in=exclude)
        .only("pk", "revision")
        .order_by("pk")
        .first()
    )
