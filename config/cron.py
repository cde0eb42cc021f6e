"""Periodic jobs, run by `manage.py rqcron config.cron` (the `cron` process). Their routine
INFO lines are filtered out (config/logs.py): an idle installation prints nothing."""
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

for job, interval, name in PERIODIC_JOBS:
    cron.register(job, "default", interval=interval, name=name, job_timeout=JOB_TIMEOUTS.get(name))
