"""Fair ingestion (issue 12, item 4): which pending document a free worker takes next.

rq's queue is first in, first out, so a job per document let one account's backlog hold
every other account's uploads behind it. Instead, every upload (reindex, retry, sweep)
enqueues the same job, "ingest the next document, fairly", and the job claims a document
from PostgreSQL when it starts: the oldest pending document of the account with the fewest
documents in flight, then never or least recently served (its last fair claim), then waiting
longest. So a small document from account B waits at most for the jobs already running,
whatever account A has queued, and the queue holds as many jobs as there are documents to
ingest.

Each account has a lane (documents.models.IngestionLane): a trigger marks it waiting when a
document becomes pending, the claim marks it idle when nothing is left, and the claim reads
the fairest waiting lanes through an index, so its cost does not grow with the number of
accounts waiting (docs/benchmarks.md, "The claim with thousands of accounts waiting").

Durable: the pending documents are the queue; a lost job is made up by the sweeper
(documents.jobs.requeue_stale_work), and a job that finds nothing to claim returns quietly.
"""
from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.utils import timezone

from core.tenancy import account_context, dangerously_bypass_tenancy
from documents import ingestion
from documents.models import Document, ReindexRun, Status

logger = logging.getLogger("groundwork.documents")

# One claim at a time across every worker (a transaction-scoped advisory lock, held for the
# few milliseconds a claim takes), so each claimer ranks the accounts with the claims before
# it already counted. The number is arbitrary; it only has to be this lock's own.
CLAIM_LOCK = 0x67776E6471  # "gwndq"

# Lanes read per query while looking for one with a document to take (a lane whose documents
# are all locked by another transaction, or the running reindex run's, is passed over).
LANE_BATCH = 32

# Accounts with documents in flight, and how many: a document a worker holds (fresh heartbeat).
# Bounded by the number of workers, and read through the (status) index.
_BUSY_SQL = """
SELECT account_id, count(*) FROM documents_document
WHERE status = %(processing)s AND heartbeat_at >= %(fresh)s GROUP BY account_id
"""

# Waiting lanes of accounts with nothing in flight, fairest first, through the partial index
# ingestion_lane_fairest: O(log n) however many accounts wait.
_IDLE_LANES_SQL = """
SELECT account_id FROM documents_ingestionlane
WHERE waiting AND NOT (account_id = ANY(%(skip)s))
ORDER BY served_at ASC NULLS FIRST, waiting_since, account_id
LIMIT %(limit)s
"""

# Waiting lanes of accounts with documents in flight (at most one per busy account).
_BUSY_LANES_SQL = """
SELECT account_id, served_at, waiting_since FROM documents_ingestionlane
WHERE waiting AND account_id = ANY(%(busy)s)
"""

# The lane's row lock, taken before its documents are looked at: a document that becomes
# pending meanwhile marks the lane (the trigger) only after this claim has committed.
_LOCK_LANE_SQL = "SELECT 1 FROM documents_ingestionlane WHERE account_id = %s AND waiting FOR UPDATE"

# (The clock's time, not the transaction's: claims in one transaction still have an order.)
_SERVED_SQL = "UPDATE documents_ingestionlane SET served_at = clock_timestamp() WHERE account_id = %s"

# No document left to take: the lane stops waiting. A running reindex run's current document
# is the run's, so it keeps no lane waiting (the sweeper marks the lane again if the run
# stops and leaves it pending).
_IDLE_SQL = """
UPDATE documents_ingestionlane SET waiting = false, waiting_since = NULL
WHERE account_id = %(account)s AND NOT EXISTS (
    SELECT 1 FROM documents_document AS d
    WHERE d.account_id = %(account)s AND d.status = %(pending)s AND NOT EXISTS (
        SELECT 1 FROM documents_reindexrun AS r
        WHERE r.account_id = d.account_id AND r.status = %(running)s AND r.current_document_id = d.id))
"""

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
                pk=document.pk, revision=document.revision, status=Status.PROCESSING).update(status=Status.PENDING)
    except DatabaseError:
        logger.warning("could not hand document %s back after a database error; the sweeper will", document.pk)


def claim_next() -> Document | None:
    """Mark the fairest pending document `processing` and return it (None: nothing to take).

    The fairest account: the fewest documents in flight, then never served or served least
    recently, then waiting longest. Accounts with nothing in flight come from their lanes'
    index; the few with documents in flight (at most one per worker) are ranked here.

    NOTE: two workers claiming at once are serialised by CLAIM_LOCK, and the document row is
    locked FOR UPDATE SKIP LOCKED too, so a document is claimed by one job only; a run of
    the same document's reindex (which claims through ingestion._claim, under the same row
    lock) cannot take it at the same moment either.
    """
    fresh = timezone.now() - dt.timedelta(seconds=settings.DOCUMENT_STALE_SECONDS)
    with dangerously_bypass_tenancy(reason="ingestion: claim the next document fairly across accounts"):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CLAIM_LOCK])
            cursor.execute(_BUSY_SQL, {"processing": Status.PROCESSING, "fresh": fresh})
            busy = dict(cursor.fetchall())
            for account_id in _fairest_lanes(cursor, busy):
                document = _claim_from(cursor, account_id)
                if document is not None:
                    logger.info("claimed document %s of account %s (%d accounts with documents in flight)",
                                document.pk, account_id, len(busy))
                    return document
    return None


def _fairest_lanes(cursor, busy: dict[int, int]):
    """Waiting accounts, fairest first: those with nothing in flight from the index, a batch
    at a time (a lane that gave nothing is skipped by the next batch), then the busy ones by
    how many they have in flight."""
    skip = list(busy)
    while True:
        cursor.execute(_IDLE_LANES_SQL, {"skip": skip, "limit": LANE_BATCH})
        lanes = [row[0] for row in cursor.fetchall()]
        if not lanes:
            break
        for account_id in lanes:
            yield account_id
            skip.append(account_id)
    if busy:
        cursor.execute(_BUSY_LANES_SQL, {"busy": list(busy)})
        never = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
        for account_id, _, _ in sorted(cursor.fetchall(), key=lambda lane: (
                busy[lane[0]], lane[1] is not None, lane[1] or never, lane[2] or never, lane[0])):
            yield account_id


def _claim_from(cursor, account_id: int) -> Document | None:
    """The account's oldest pending document, claimed; or None, and the lane marked idle when
    the account has nothing pending left."""
    cursor.execute(_LOCK_LANE_SQL, [account_id])
    if cursor.fetchone() is None:  # marked idle by a claim that committed meanwhile
        return None
    tried: set[int] = set()
    while (candidate := _oldest_pending(account_id, exclude=tried)) is not None:
        tried.add(candidate.pk)
        # The claim itself is the pipeline's (attempts, heartbeat, a document that
        # crashed too often fails there), in the document's account context.
        document = ingestion.claim(account_id, candidate.pk, candidate.revision)
        if document is not None:
            cursor.execute(_SERVED_SQL, [account_id])
            return document
    cursor.execute(_IDLE_SQL, {"account": account_id, "pending": Status.PENDING,
                               "running": ReindexRun.RunStatus.RUNNING})
    return None


def mark_stale_waiting(stale_before) -> list[int]:
    """The sweeper's safety net (documents.jobs.requeue_stale_work): mark waiting the lanes of
    accounts whose documents have been pending since before `stale_before` without their lane
    saying so. Returns those accounts (normally none). Runs inside the sweeper's bypass."""
    with connection.cursor() as cursor:
        cursor.execute(_MARK_STALE_WAITING_SQL, {"pending": Status.PENDING, "stale_before": stale_before,
                                                 "running": ReindexRun.RunStatus.RUNNING})
        return [row[0] for row in cursor.fetchall()]


def _oldest_pending(account_id: int, *, exclude: set[int]) -> Document | None:
    running_runs = ReindexRun.all_accounts.filter(account_id=account_id, status=ReindexRun.RunStatus.RUNNING,
                                                  current_document_id__isnull=False)
    return (Document.all_accounts.select_for_update(skip_locked=True, of=("self",))
            .filter(account_id=account_id, status=Status.PENDING)
            .exclude(pk__in=running_runs.values("current_document_id")).exclude(pk__in=exclude)
            .only("pk", "revision").order_by("pk").first())
