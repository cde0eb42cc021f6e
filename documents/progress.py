"""How far a document being indexed has got and how long it has left: chunks embedded of the
document's total, the time left at this server's measured embedding rate, and, while it waits,
its place in its account's queue (documents/ingestion_queue.py takes an account's oldest
pending document first).

The rate is measured, not assumed: every ingestion run reports its throughput (chunks embedded
per second of embedding, per embedding model) after each batch it stages, and the cache keeps a
moving average shared by every worker and web process. Until a model was measured, no time is
promised (`eta_seconds` null)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from documents.models import Document, Status

logger = logging.getLogger("groundwork.documents")

# Weight of the newest throughput in the moving average: a busy server slows every estimate
# within a few batches; one odd batch moves it by a third.
SMOOTHING = 0.3
RATE_TTL_SECONDS = 7 * 24 * 3600


def _rate_key(model: str) -> str:
    return f"embedding-rate:{model}"


def rate_record(model: str, *, chunks: int, seconds: float) -> None:
    """Report a run's throughput so far: `chunks` embedded in `seconds` of embedding."""
    if chunks <= 0 or seconds <= 0:
        return
    sample = chunks / seconds
    try:
        before = cache.get(_rate_key(model))
        rate = sample if before is None else (1 - SMOOTHING) * before + SMOOTHING * sample
        cache.set(_rate_key(model), rate, RATE_TTL_SECONDS)
    except Exception:  # the cache (Redis) away: this sample is lost, the ingestion goes on
        logger.warning("embedding rate not recorded: the cache is unavailable", exc_info=True)


def measured_rate(model: str) -> float | None:
    """Chunks per second this server embeds `model` at lately, or None before any was measured
    (or while the cache is unavailable: no time is promised, everything else still answers)."""
    try:
        rate = cache.get(_rate_key(model))
    except Exception:
        return None
    return float(rate) if rate else None


def eta_seconds(document: Document, *, model: str) -> int | None:
    """Seconds left to embed a processing document at the measured rate, or None while it is
    still being read (its chunks not counted yet) or before the model's rate is known."""
    if not document.chunks_total:
        return None
    rate = measured_rate(model)
    if rate is None:
        return None
    return math.ceil(max(document.chunks_total - document.chunks_embedded, 0) / rate)


def queue_positions(account_id: int, document_ids: list[int]) -> dict[int, int]:
    """{document id: 1 for the next one this account's queue takes, 2 for the one after, …}
    for those of `document_ids` that are pending."""
    # A document waiting for the model server until `retry_at` is skipped until then (its
    # message says so): it holds no place meanwhile.
    pending = list(
        Document.objects.for_account(account_id)
        .filter(status=Status.PENDING)
        .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=timezone.now()))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    wanted = set(document_ids)
    return {pk: place for place, pk in enumerate(pending, start=1) if pk in wanted}


def progress_of(document: Document, *, model: str, position: int | None = None) -> dict | None:
    """The API's `progress` (CONTRACT): None once the document is ready, failed or deleting."""
    if document.status not in (Status.PENDING, Status.PROCESSING):
        return None
    processing = document.status == Status.PROCESSING
    return {
        "chunks_embedded": document.chunks_embedded if processing else 0,
        "chunks_total": document.chunks_total if processing else 0,
        "eta_seconds": eta_seconds(document, model=model) if processing else None,
        "chunks_per_second": round(rate, 2) if (rate := measured_rate(model)) else None,
        "queue_position": None if processing else position,
    }


def duration_text(seconds: int) -> str:
    """ "about 40 s", "about 3 min", "about 1 h 20 min": what the pages say."""
    if seconds < 60:
        return f"about {max(seconds, 1)} s"
    minutes = math.ceil(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"about {hours} h {minutes} min" if minutes else f"about {hours} h"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


@dataclass
class PageProgress:
    """What a page of documents needs for their progress, looked up once for the page: each
    account's active embedding model (whose rate the times use) and the waiting ones' places."""

    models: dict[int, str] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)

    def progress(self, document: Document) -> dict | None:
        model = self.models.get(document.account_id, "")
        return progress_of(document, model=model, position=self.positions.get(document.pk))

    def text(self, document: Document) -> str:
        """The status badge's words after the status: "412/1,250 chunks · about 3 min left",
        "1st in line", "reading the file"; "" once ready or failed."""
        return progress_text(document.status, self.progress(document))


def page_context(documents: list[Document]) -> PageProgress:
    from documents.embedding import active_embedding_model

    busy = [d for d in documents if d.status in (Status.PENDING, Status.PROCESSING)]
    result = PageProgress()
    for account_id in {d.account_id for d in busy}:
        result.models[account_id] = active_embedding_model(account_id=account_id).model
        waiting = [d.pk for d in busy if d.account_id == account_id and d.status == Status.PENDING]
        if waiting:
            result.positions.update(queue_positions(account_id, waiting))
    return result


def progress_text(status: str, shown: dict | None) -> str:
    """The same words the pages' scripts write (static/js/app.js, Groundwork.progressText)."""
    if shown is None:
        return ""
    if status == Status.PENDING:
        return f"{ordinal(shown['queue_position'])} in line" if shown["queue_position"] else ""
    if not shown["chunks_total"]:
        return "reading the file"
    words = f"{shown['chunks_embedded']:,}/{shown['chunks_total']:,} chunks"
    if shown["eta_seconds"] is not None:
        words += f" · {duration_text(shown['eta_seconds'])} left"
    return words
