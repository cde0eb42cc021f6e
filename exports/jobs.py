"""django-rq entry points for exports: thin, take ids, call the pipeline; and the cron job
that deletes expired files. Enqueued with transaction.on_commit."""

from __future__ import annotations

import django_rq
from django.db import transaction
from rq import Retry

from exports import pipeline

JOB_TIMEOUT = 60 * 60


def enqueue_build(export) -> None:
    retry = Retry(max=3, interval=[10, 30, 90])
    transaction.on_commit(
        lambda: django_rq.get_queue("default").enqueue(
            build_export, export_id=export.pk, user_id=export.user_id, job_timeout=JOB_TIMEOUT, retry=retry
        )
    )


def build_export(*, export_id: int, user_id: int) -> None:
    """Build one export. Idempotent: an export no longer pending is left as it is."""
    pipeline.export_build(export_id=export_id, user_id=user_id)


def cleanup_exports() -> None:
    """Cron: delete expired exports' files; fail exports lost with their worker."""
    pipeline.exports_cleanup()
