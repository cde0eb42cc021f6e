"""documents' gauges for /metrics (core/metrics.py), read from PostgreSQL at scrape time:
documents by status, and the ingestion queue (the pending documents are the queue:
documents/ingestion_queue.py). Counts over every account, never per account."""

from __future__ import annotations

from django.db.models import Count, Min
from django.db.models.functions import Coalesce
from django.utils import timezone

from core import metrics
from core.tenancy import dangerously_bypass_tenancy
from documents.models import Document, Status

# Read once per scrape; the log filter (config/logs.py) keeps its INFO line quiet.
BYPASS_REASON = "metrics: count documents by status"


def _by_status():
    with dangerously_bypass_tenancy(reason=BYPASS_REASON):
        counts = dict(Document.all_accounts.values_list("status").annotate(n=Count("id")).order_by())
    for status in Status.values:
        yield (status,), counts.get(status, 0)


def _pending() -> dict:
    # Waiting since its last heartbeat (a re-queued document) or its upload, as the sweeper reads it.
    with dangerously_bypass_tenancy(reason=BYPASS_REASON):
        return Document.all_accounts.filter(status=Status.PENDING).aggregate(
            n=Count("id"), oldest=Min(Coalesce("heartbeat_at", "created_at"))
        )


def _queue_depth():
    yield (), _pending()["n"]


def _queue_oldest():
    oldest = _pending()["oldest"]
    yield (), max(0.0, (timezone.now() - oldest).total_seconds()) if oldest else 0.0


def register() -> None:
    metrics.scrape_gauge("groundwork_documents", "Documents by status, over every account.", ("status",), _by_status)
    metrics.scrape_gauge("groundwork_ingestion_queue_depth", "Documents waiting to be ingested.", (), _queue_depth)
    metrics.scrape_gauge(
        "groundwork_ingestion_queue_oldest_seconds",
        "How long the oldest waiting document has waited (0 when none waits).",
        (),
        _queue_oldest,
    )
