"""Periodic jobs, run by `manage.py rqcron config.cron` (the `cron` process). Their routine
INFO lines are filtered out (config/logs.py): an idle installation prints nothing.

Each job runs at most once per its interval across the whole installation, however many
cron processes enqueue it (two nodes each running `make run`, or a second cron during a
failover): the cron process enqueues `run_periodic(name)`, and the run that starts first
takes the job's lease in Redis (SET NX with an expiry just under the interval); a run that
finds the lease taken does nothing. The jobs are idempotent besides (sources/schedule.py,
billing's hold release), so a lease lost to a Redis restart costs one extra run, no harm.
"""

from __future__ import annotations

import os
import socket

from rq import cron

from billing.jobs import release_stale_holds
from config.backup import scheduled_backup
from documents.jobs import backfill_document_languages, requeue_stale_work
from exports.jobs import cleanup_exports
from retrieval.jobs import refresh_search_indexes
from sources.schedule import sync_due_sources

# (job, every N seconds, name)
PERIODIC_JOBS = [
    (release_stale_holds, 60, "release-stale-holds"),
    (requeue_stale_work, 60, "requeue-stale-documents"),
    (refresh_search_indexes, 600, "refresh-search-indexes"),
    (cleanup_exports, 600, "cleanup-exports"),
    (backfill_document_languages, 600, "backfill-document-languages"),
    # Hourly and daily source syncs: due ones started once each (sources/schedule.py).
    (sync_due_sources, 60, "sync-due-sources"),
    # BACKUP_SCHEDULE's archives, once per period (config/backup.py); a no-op when off.
    (scheduled_backup, 60, "scheduled-backup"),
]
# A large database's backup may run past rq's default job timeout.
JOB_TIMEOUTS = {"scheduled-backup": 6 * 3600}

# A lease a little shorter than the interval: the next enqueue (one interval later, from
# whichever cron process) finds it free, a second cron process's enqueue in between does not.
LEASE_FRACTION = 0.9


def lease_key(name: str) -> str:
    return f"groundwork:cron:{name}"


def run_periodic(name: str) -> dict:
    """Run the periodic job `name` unless another run took its lease this interval. Returns
    {"name", "ran", "result", "by"} (kept by rq as the job's result: the two-node test reads it)."""
    import django_rq

    job, interval = next((job, interval) for job, interval, job_name in PERIODIC_JOBS if job_name == name)
    holder = f"{socket.gethostname()}:{os.getpid()}"
    taken = django_rq.get_connection("default").set(
        lease_key(name), holder, nx=True, px=int(interval * LEASE_FRACTION * 1000)
    )
    if not taken:
        return {"name": name, "ran": False, "result": None, "by": holder}
    return {"name": name, "ran": True, "result": job(), "by": holder}


for _job, _interval, _name in PERIODIC_JOBS:
    cron.register(
        run_periodic, "default", args=(_name,), interval=_interval, name=_name, job_timeout=JOB_TIMEOUTS.get(_name)
    )
