"""Periodic jobs, run by `manage.py rqcron config.cron` (the `cron` process)."""
from rq import cron

from billing.jobs import release_stale_holds
from documents.jobs import refresh_search_indexes, requeue_stale_work
from exports.jobs import cleanup_exports

cron.register(release_stale_holds, "default", interval=60, name="release-stale-holds")
cron.register(requeue_stale_work, "default", interval=60, name="requeue-stale-documents")
cron.register(refresh_search_indexes, "default", interval=600, name="refresh-search-indexes")
cron.register(cleanup_exports, "default", interval=600, name="cleanup-exports")
