"""django-rq entry points for documents: thin, take ids, re-fetch, call the pipeline; and
the stale-work sweeper's cron job (the search index refresh is retrieval's: retrieval/jobs.py).

Enqueued with transaction.on_commit, never inside an open transaction. Imports go one
way: services -> jobs -> ingestion and search; neither of those imports this module.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid

import django_rq
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from rq import Retry

from core.tenancy import account_context, dangerously_bypass_tenancy
from documents import ingestion, ingestion_queue, purge
from documents.fulltext import document_languages_backfill
from documents.models import Document, ReindexRun, Status

logger = logging.getLogger("groundwork.documents")

JOB_TIMEOUT = ingestion.INGEST_JOB_TIMEOUT


# Every "ingest the next document" job's id starts with it (the sweeper counts them by id).
INGESTION_JOB_PREFIX = ingestion_queue.INGESTION_JOB_PREFIX


def _enqueue(func, *, job_id: str | None = None, **kwargs) -> None:
    # Retries cover a database that is briefly unreachable; everything else is handled
    # (and reported on the document) inside the job. robust: with Redis unreachable the
    # request still answers (the rows are committed, the failure is logged), and the
    # sweeper queues the waiting work again once Redis is back (requeue_stale_work).
    retry = Retry(max=3, interval=[10, 30, 90])
    transaction.on_commit(
        lambda: django_rq.get_queue("default").enqueue(
            func, job_timeout=JOB_TIMEOUT, retry=retry, job_id=job_id, kwargs=kwargs
        ),
        robust=True,
    )


def enqueue_ingest(document) -> None:
    """One more document to ingest: one more "ingest the next document, fairly" job. Which
    document it takes is decided when a worker starts it (documents/ingestion_queue.py), so
    the queue's order is not the order documents are ingested in."""
    _enqueue(ingest_next_document, job_id=f"{INGESTION_JOB_PREFIX}{uuid.uuid4().hex}")


def enqueue_delete(document) -> None:
    _enqueue(delete_document, document_id=document.pk, account_id=document.account_id)


def enqueue_reindex_run(run) -> None:
    _enqueue(reindex_account, run_id=run.pk, account_id=run.account_id)


def enqueue_account_purge(*, account_id: int) -> None:
    _enqueue(purge_account, account_id=account_id)


def ingest_next_document() -> None:
    """Ingest the pending document of the account with the fewest in flight, served least
    recently (documents/ingestion_queue.py). Takes no ids: it claims one. Run twice, it
    claims two documents or returns quietly when none is pending; a document is claimed once."""
    ingestion_queue.ingest_next()


def ingest_document(*, document_id: int, revision: int, account_id: int) -> None:
    """Parse, chunk, embed and publish one revision of a document. Safe to run twice.

    Kept for jobs enqueued before fair ingestion (and for scripts that ingest one named
    document): uploads enqueue ingest_next_document instead."""
    ingestion.ingest(account_id=account_id, document_id=document_id, revision=revision)


def delete_document(*, document_id: int, account_id: int) -> None:
    """Remove a deleted document's chunks, staging and stored file. Idempotent."""
    ingestion.purge(account_id=account_id, document_id=document_id)


def purge_account(*, account_id: int) -> None:
    """Remove a deleted account's documents, files, chunks, staging and collections.
    Idempotent and resumable; does nothing to an account that is not deleted."""
    purge.account_purge(account_id=account_id)


def reindex_account(*, run_id: int, account_id: int) -> None:
    """Re-embed an account's documents one by one; resumable, cancellable."""
    ingestion.reindex_run(account_id=account_id, run_id=run_id)


def backfill_document_languages() -> int:
    """Cron: documents ingested before languages were detected get theirs (documents/fulltext.py)."""
    return document_languages_backfill()


def requeue_stale_work() -> int:
    """Cron: re-queue documents and reindex runs whose worker died (stale heartbeat), and
    make sure every document still waiting has a job to take it.

    Returns how many were re-queued. A re-queued job that finds its work done or
    superseded returns quietly, so re-queueing a slow (not dead) worker's job is harmless.
    """
    stale_before = timezone.now() - dt.timedelta(seconds=settings.DOCUMENT_STALE_SECONDS)
    with dangerously_bypass_tenancy(reason="documents sweep: find stale ingestion work"):
        stale = Q(heartbeat_at__lt=stale_before) | Q(heartbeat_at__isnull=True, created_at__lt=stale_before)
        documents = list(
            Document.all_accounts.filter(stale, status=Status.PROCESSING).values_list("pk", "revision", "account_id")
        )
        # A running reindex run's current document is the run's to ingest, not a job's.
        runs_current = ReindexRun.all_accounts.filter(status=ReindexRun.RunStatus.RUNNING).values("current_document_id")
        waiting = Document.all_accounts.filter(stale, status=Status.PENDING).exclude(pk__in=runs_current).count()
        if waiting:  # every account with such a document has its lane waiting (normally so already)
            marked = ingestion_queue.mark_stale_waiting(stale_before)
            if marked:
                logger.warning("ingestion lanes of accounts %s were not waiting; marked", marked)
        runs = list(
            ReindexRun.all_accounts.filter(
                status=ReindexRun.RunStatus.RUNNING, heartbeat_at__lt=stale_before
            ).values_list("pk", "account_id")
        )
    for document_id, revision, account_id in documents:
        logger.warning("re-queueing stale document %s rev %s", document_id, revision)
        with account_context(account_id=account_id):
            # Back to pending, where the fair claim (or the document's reindex run) takes it
            # again; the attempts so far still count. NOTE: a slow, not dead, worker either
            # finds it pending at its next staged batch and stops quietly, or carries on
            # beside the new claim as before: batches are staged once (unique per revision
            # and batch) and the charge has one key per revision.
            Document.objects.for_account(account_id).filter(
                pk=document_id, revision=revision, status=Status.PROCESSING
            ).update(status=Status.PENDING, heartbeat_at=timezone.now())
            enqueue_ingest(Document(pk=document_id, revision=revision, account_id=account_id))
    missing = _top_up_ingestion_jobs(waiting)
    for run_id, account_id in runs:
        with account_context(account_id=account_id):
            ReindexRun.objects.for_account(account_id).filter(pk=run_id).update(heartbeat_at=timezone.now())
            enqueue_reindex_run(ReindexRun(pk=run_id, account_id=account_id))
    retried = ingestion.transient_failures_requeue(limit=settings.DOCUMENT_TRANSIENT_RETRY_BATCH)
    for document in retried:
        logger.warning("retrying document %s, failed earlier on a transient provider error", document.pk)
        with account_context(account_id=document.account_id):
            enqueue_ingest(document)
    return len(documents) + missing + len(runs) + len(retried)


INGESTION_JOBS = ("documents.jobs.ingest_next_document", "documents.jobs.ingest_document")


def _top_up_ingestion_jobs(waiting: int, queue=None) -> int:
    """Pending documents that have waited past DOCUMENT_STALE_SECONDS are usually just
    behind a backlog (ingestion is fair, not first come first served): as long as the queue
    holds a job for each, nothing is wrong and nothing is logged. Fewer jobs than documents
    (a lost Redis, a job that ran out of retries) get the difference queued again."""
    if not waiting:
        return 0
    # (A job queued under an id of another form, before the prefix, is not counted: at worst
    # one job too many is queued, and it returns quietly.)
    missing = ingestion_queue.QUEUE.jobs_missing(waiting, queue or django_rq.get_queue("default"))
    if missing:
        logger.warning("%s pending documents had no job to take them; queued %s", missing, missing)
        for _ in range(missing):
            enqueue_ingest(None)
    return missing
