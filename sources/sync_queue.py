"""Fair syncs: which queued sync a free worker runs next, by the fair-queue rule ingestion
claims documents by (core/fair_queue.py): the oldest queued sync of the account with the
fewest syncs in flight, then never or least recently served, then waiting longest. Every
sync asked for (added, "Sync now", a schedule) queues the same job, "sync the next source,
fairly", which claims a sync when it starts; so one account's backlog of syncs never holds
another account's sync behind all of it, and a sync waits at most for the jobs running.

A sync is queued while it is `running` and never claimed (no heartbeat), in flight once
claimed (its heartbeat, refreshed at every item, fresher than SOURCES_SYNC_STALE_SECONDS).
Durable: the queued syncs are the queue; a lost job is made up by the cron
(sources.jobs.top_up_sync_jobs), and a job that finds nothing to claim returns quietly.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import connection
from django.utils import timezone

from core.fair_queue import FairQueue
from core.tenancy import account_context, dangerously_bypass_tenancy
from sources.models import SourceSync, SyncStatus

SYNC_JOB_PREFIX = "sync-next-"

# Accounts with syncs in flight, and how many (bounded by the number of workers).
_BUSY_SQL = """
SELECT account_id, count(*) FROM sources_sourcesync
WHERE status = %(running)s AND heartbeat_at >= %(fresh)s GROUP BY account_id
"""

_WAITING_SQL = """
    SELECT 1 FROM sources_sourcesync
    WHERE account_id = %(account)s AND status = %(running)s AND heartbeat_at IS NULL
"""

QUEUE = FairQueue(
    item="sync",
    logger="groundwork.sources",
    lanes="sources_synclane",
    lock=0x67777379,  # "gwsy": one claim at a time across every worker
    job_prefix=SYNC_JOB_PREFIX,
    waiting_sql=_WAITING_SQL,
    waiting_params={"running": SyncStatus.RUNNING},
)


def sync_queued(sync: SourceSync) -> None:
    """The sync's account has a sync waiting: its lane says so (in the sync's transaction).

    NOTE: a claim marking the lane idle at this moment holds the lane's row lock, so this
    waits for it and marks the lane waiting again after it: the sync is not lost."""
    with connection.cursor() as cursor:
        QUEUE.mark_waiting(cursor, sync.account_id)


def claim_next() -> SourceSync | None:
    """Claim the fairest queued sync (its heartbeat set: in flight) and return it; None when
    no sync waits."""
    fresh = timezone.now() - dt.timedelta(seconds=settings.SOURCES_SYNC_STALE_SECONDS)
    with dangerously_bypass_tenancy(reason="sources: claim the next sync fairly across accounts"):
        with connection.cursor() as cursor:
            return QUEUE.claim(
                cursor, busy_sql=_BUSY_SQL, busy_params={"running": SyncStatus.RUNNING, "fresh": fresh}, take=_take
            )


def _take(account_id: int) -> SourceSync | None:
    """The account's oldest queued sync, claimed (a sync another claim holds is passed over)."""
    with account_context(account_id=account_id):
        sync = (
            SourceSync.objects.for_account(account_id)
            .select_for_update(skip_locked=True, of=("self",))
            .filter(status=SyncStatus.RUNNING, heartbeat_at__isnull=True)
            .order_by("pk")
            .first()
        )
        if sync is not None:
            sync.heartbeat_at = timezone.now()
            sync.save(update_fields=["heartbeat_at"])
        return sync


def syncs_waiting_long() -> int:
    """Syncs queued, not yet claimed, for longer than SOURCES_SYNC_STALE_SECONDS (in every
    account): usually just behind a backlog; a sync queued a moment ago may not have its job
    in the queue yet (it is enqueued once its transaction commits), so it is not counted."""
    before = timezone.now() - dt.timedelta(seconds=settings.SOURCES_SYNC_STALE_SECONDS)
    with dangerously_bypass_tenancy(reason="sources: count the syncs waiting for a worker"):
        return SourceSync.all_accounts.filter(
            status=SyncStatus.RUNNING, heartbeat_at__isnull=True, started_at__lt=before
        ).count()
