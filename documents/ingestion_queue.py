"""Fair ingestion (issue 12, item 4): which pending document a free worker takes next.

rq's queue is first in, first out, so a job per document let one account's backlog hold
every other account's uploads behind it. Instead, every upload (reindex, retry, sweep)
enqueues the same job, "ingest the next document, fairly", and the job claims a document
from PostgreSQL when it starts: a pending document of the account with the fewest documents
in flight, then the one served least recently (its last claim), then the oldest. So a small
document from account B waits at most for the jobs already running, whatever account A has
queued, and the queue holds as many jobs as there are documents to ingest.

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

# Accounts with pending documents, fairest first. Every subquery is per candidate account
# and served by an index: (status) for pending and processing, (account_id, claimed_at) for
# the last claim. Documents of a running reindex run are the run's to ingest (it claims them
# itself, one after another), so they make no account a candidate.
_ACCOUNTS_SQL = """
SELECT p.account_id
FROM (SELECT DISTINCT d.account_id FROM documents_document AS d
      WHERE d.status = %(pending)s AND NOT EXISTS (
          SELECT 1 FROM documents_reindexrun AS r
          WHERE r.account_id = d.account_id AND r.status = %(running)s AND r.current_document_id = d.id)) AS p
ORDER BY
    (SELECT count(*) FROM documents_document AS f
     WHERE f.account_id = p.account_id AND f.status = %(processing)s AND f.heartbeat_at >= %(fresh)s),
    (SELECT max(s.claimed_at) FROM documents_document AS s WHERE s.account_id = p.account_id) NULLS FIRST,
    (SELECT min(o.id) FROM documents_document AS o WHERE o.account_id = p.account_id AND o.status = %(pending)s)
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

    NOTE: two workers claiming at once are serialised by CLAIM_LOCK, and the document row is
    locked FOR UPDATE SKIP LOCKED too, so a document is claimed by one job only; a run of
    the same document's reindex (which claims through ingestion._claim, under the same row
    lock) cannot take it at the same moment either.
    """
    fresh = timezone.now() - dt.timedelta(seconds=settings.DOCUMENT_STALE_SECONDS)
    with dangerously_bypass_tenancy(reason="ingestion: claim the next document fairly across accounts"):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CLAIM_LOCK])
            cursor.execute(_ACCOUNTS_SQL, {"pending": Status.PENDING, "processing": Status.PROCESSING,
                                           "running": ReindexRun.RunStatus.RUNNING, "fresh": fresh})
            accounts = [row[0] for row in cursor.fetchall()]
        tried: set[int] = set()
        for account_id in accounts:
            while (candidate := _oldest_pending(account_id, exclude=tried)) is not None:
                tried.add(candidate.pk)
                # The claim itself is the pipeline's (attempts, heartbeat, a document that
                # crashed too often fails there), in the document's account context.
                document = ingestion.claim(account_id, candidate.pk, candidate.revision)
                if document is not None:
                    logger.info("claimed document %s of account %s (%d accounts waiting)",
                                document.pk, account_id, len(accounts))
                    return document
    return None


def _oldest_pending(account_id: int, *, exclude: set[int]) -> Document | None:
    running_runs = ReindexRun.all_accounts.filter(account_id=account_id, status=ReindexRun.RunStatus.RUNNING,
                                                  current_document_id__isnull=False)
    return (Document.all_accounts.select_for_update(skip_locked=True, of=("self",))
            .filter(account_id=account_id, status=Status.PENDING)
            .exclude(pk__in=running_runs.values("current_document_id")).exclude(pk__in=exclude)
            .only("pk", "revision").order_by("pk").first())
