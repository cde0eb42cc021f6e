"""django-rq entry points for sources: thin, take ids, call the sync (the cron job that
starts scheduled syncs is sources/schedule.py's). Enqueued with transaction.on_commit, never inside an open transaction."""
from __future__ import annotations

import django_rq
from django.db import transaction
from rq import Retry

from sources import sync

JOB_TIMEOUT = 60 * 60


def _enqueue(func, **kwargs) -> None:
    # Retries cover a database briefly unreachable; a sync reports its own failures.
    retry = Retry(max=3, interval=[10, 30, 90])
    transaction.on_commit(lambda: django_rq.get_queue("default").enqueue(
        func, job_timeout=JOB_TIMEOUT, retry=retry, kwargs=kwargs))


def enqueue_sync(source_sync) -> None:
    _enqueue(sync_source, account_id=source_sync.account_id, sync_id=source_sync.pk)


def enqueue_purge(source) -> None:
    _enqueue(purge_source, account_id=source.account_id, source_id=source.pk)


def sync_source(*, account_id: int, sync_id: int) -> None:
    """Run one sync of a source. Run twice, it syncs once (sources/sync.py claims it)."""
    sync.sync_run(account_id=account_id, sync_id=sync_id)


def purge_source(*, account_id: int, source_id: int) -> None:
    """Delete a deleted source's documents, then the source. Idempotent."""
    sync.source_purge(account_id=account_id, source_id=source_id)

