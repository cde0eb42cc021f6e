"""Periodic jobs, run by `manage.py rqcron config.cron` (the `cron` process)."""
from rq import cron

from billing.jobs import release_stale_holds

cron.register(release_stale_holds, "default", interval=60, name="release-stale-holds")
