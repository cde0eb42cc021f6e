"""django-rq entry points for sources: thin, take ids, call the sync (the cron job that
starts scheduled syncs is sources/schedule.py's). Enqueued with transaction.on_commit, never inside an open transaction."""

from __future__ import annotations

import logging
import uuid

import django_rq
from django.conf import settings
from django.db import transaction
from rq import Retry

from sources import sync, sync_queue

logger = logging.getLogger("groundwork.sources")

JOB_TIMEOUT = 60 * 60


def _enqueue(func, *, job_timeout: int = JOB_TIMEOUT, job_id: str | None = None, **kwargs) -> None:
    # Retries cover a database briefly unreachable; a sync reports its own failures.
    retry = Retry(max=3, interval=[10, 30, 90])
    transaction.on_commit(
        lambda: django_rq.get_queue("default").enqueue(
            func, job_timeout=job_timeout, retry=retry, job_id=job_id, kwargs=kwargs
        )
    )


def enqueue_sync(source_sync) -> None:
    """One more sync queued: one more "sync the next source, fairly" job. Which sync it runs
    is decided when a worker starts it (sources/sync_queue.py)."""
    enqueue_next_sync()


def enqueue_next_sync() -> None:
    _enqueue(
        sync_next_source,
        job_id=f"{sync_queue.SYNC_JOB_PREFIX}{uuid.uuid4().hex}",
        job_timeout=settings.SOURCES_SYNC_JOB_TIMEOUT_SECONDS,
    )


def enqueue_purge(source) -> None:
    _enqueue(purge_source, account_id=source.account_id, source_id=source.pk)


def sync_next_source() -> None:
    """Claim the fairest queued sync (sources/sync_queue.py) and run it to its end. Takes no
    ids: it claims one. Run twice, it runs two syncs, or returns quietly when none waits."""
    claimed = sync_queue.claim_next()
    if claimed is not None:
        sync.sync_run_claimed(account_id=claimed.account_id, sync_id=claimed.pk)


def sync_source(*, account_id: int, sync_id: int) -> None:
    """Run one named sync. Run twice, it syncs once (sources/sync.py claims it).

    Kept for jobs queued before fair syncs: sources queue sync_next_source instead."""
    sync.sync_run(account_id=account_id, sync_id=sync_id)


def purge_source(*, account_id: int, source_id: int) -> None:
    """Delete a deleted source's documents, then the source. Idempotent."""
    sync.source_purge(account_id=account_id, source_id=source_id)


def top_up_sync_jobs(queue=None) -> int:
    """Cron: a sync queued past SOURCES_SYNC_STALE_SECONDS is usually just behind a backlog
    (syncs are fair, not first come first served) and waits, not failed, as long as the queue
    holds a job for each; fewer jobs than such syncs (a lost Redis, a job out of retries) get
    the difference queued again. Returns how many were queued."""
    missing = sync_queue.QUEUE.jobs_missing(sync_queue.syncs_waiting_long(), queue or django_rq.get_queue("default"))
    if missing:
        logger.warning("%s queued syncs had no job to take them; queued %s", missing, missing)
        for _ in range(missing):
            enqueue_next_sync()
    return missing
