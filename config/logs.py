"""Logging that stays quiet when nothing happens: the periodic jobs of config/cron.py run
every minute or ten, and each run printed about five INFO lines (the worker's start, OK
and result lines, the job's audited tenancy bypass). An idle installation should print
nothing; its warnings and errors, and every other job's lines, still pass. A scrape of
/metrics (every 15 s or so) reads the documents' counts through the audited tenancy bypass:
its INFO line is dropped too.

LOG_FORMAT=json: JsonFormatter writes each record as one JSON object a line."""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import re

_JOB_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


@functools.cache
def _periodic_job_names() -> frozenset[str]:
    from config.cron import PERIODIC_JOBS, run_periodic  # imported late: the jobs need the app registry

    # The worker names a job by its path, the cron process by its function's name; the cron
    # process enqueues each one as run_periodic(name) (config/cron.py: once per interval).
    return frozenset(
        name
        for func in [run_periodic] + [func for func, _, _ in PERIODIC_JOBS]
        for name in (f"{func.__module__}.{func.__name__}", func.__name__)
    )


_METRICS_BYPASS = "tenancy bypass: metrics: count documents by status"  # documents/metrics.py's reason


class QuietPeriodicJobs(logging.Filter):
    """Drops INFO (and lower) records about a periodic job's run."""

    def __init__(self, name: str = ""):
        super().__init__(name)
        self._job_ids: set[str] = set()  # ids of periodic jobs seen in this process

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        if record.name.startswith("rq."):
            return not self._about_periodic_job(record.getMessage())
        if record.name == "groundwork.tenancy":
            return not (self._in_periodic_job() or record.getMessage() == _METRICS_BYPASS)
        return True

    def _about_periodic_job(self, message: str) -> bool:
        if any(name in message for name in _periodic_job_names()):
            self._job_ids.update(_JOB_ID.findall(message))
            if len(self._job_ids) > 1000:  # long-lived worker: the latest few are enough
                self._job_ids = set(list(self._job_ids)[-100:])
            return True
        return any(job_id in message for job_id in _JOB_ID.findall(message) if job_id in self._job_ids)

    @staticmethod
    def _in_periodic_job() -> bool:
        from rq import get_current_job

        job = get_current_job()
        return bool(job and job.func_name in _periodic_job_names())


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, request_id
    (null outside a request, job or turn; core/request_id.py), and exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
