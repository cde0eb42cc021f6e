"""Prometheus metrics (GET /metrics, docs/operations/metrics.md): the one place they are defined.

The apps call the helpers below at their own seams (core imports no app): the request
middleware (core/request_metrics.py), the chat driver, billing's debit and settle, the
ingestion pipeline. Gauges that describe shared state (documents by status, the ingestion
queue, open websockets, failed jobs) are not kept in any process: the apps register a
function with `scrape_gauge()` and it is read from PostgreSQL/Redis when /metrics is asked,
so whichever web process answers says the same.

Several daphne and rq processes: with PROMETHEUS_MULTIPROC_DIR set (`make run` and
`python -m config.serve` set it), each process writes its samples to files of its own in
that folder and a scrape sums them (prometheus_client's multiprocess mode). An rq worker
forks a work horse per job; the horses of one worker run one after another, so they share
one set of files ("<worker pid>-jobs") instead of leaving a set per job behind.

No metric has an account, user or key as a label: labels are views, surfaces, outcomes
(error codes), kinds and model names, all of them few.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable

from prometheus_client import values
from prometheus_client.core import GaugeMetricFamily

logger = logging.getLogger("groundwork.metrics")

MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
_identity = {"pid": os.getpid(), "id": str(os.getpid())}


def _process_identifier() -> str:
    """The name of this process's sample files. An rq work horse (forked by its worker, which
    makes it lead a process group of its own) writes "<worker pid>-jobs": the horses of one
    worker run one at a time, so they can share one set. Any other process, its own pid."""
    pid = os.getpid()
    if pid != _identity["pid"]:  # forked since it was last asked
        horse = "RQ_WORKER_ID" in os.environ and os.getpgrp() == pid
        _identity.update(pid=pid, id=f"{os.getppid()}-jobs" if horse else str(pid))
    return _identity["id"]


if MULTIPROC_DIR:
    # Must happen before any metric below is made: they take their value class from here.
    values.ValueClass = values.MultiProcessValue(process_identifier=_process_identifier)

from prometheus_client import Counter, Histogram  # noqa: E402  (after the value class is chosen)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_TURN_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60, 120)

HTTP_REQUESTS = Counter(
    "groundwork_http_requests", "HTTP requests answered, by URL name, method and status.", ["view", "method", "status"]
)
HTTP_LATENCY = Histogram(
    "groundwork_http_request_duration_seconds",
    "Time to answer an HTTP request (to the response, not the end of a stream), by URL name.",
    ["view"],
    buckets=_LATENCY_BUCKETS,
)
CHAT_TURNS = Counter(
    "groundwork_chat_turns",
    "Chat turns, by surface and outcome (done, cancelled or the error code).",
    ["surface", "outcome"],
)
CHAT_FIRST_TOKEN = Histogram(
    "groundwork_chat_time_to_first_token_seconds",
    "From the question to the first token of the answer, by surface.",
    ["surface"],
    buckets=_TURN_BUCKETS,
)
CHAT_TURN_DURATION = Histogram(
    "groundwork_chat_turn_duration_seconds",
    "From the question to the end of the turn (settled), by surface.",
    ["surface"],
    buckets=_TURN_BUCKETS,
)
TOKENS = Counter(
    "groundwork_tokens", "Provider-reported tokens charged, by kind (chat, embedding) and model.", ["kind", "model"]
)
CREDITS = Counter("groundwork_credits_debited", "Credits debited from accounts, by kind and model.", ["kind", "model"])
DOCUMENTS_INGESTED = Counter(
    "groundwork_documents_ingested", "Ingestion runs that ended, by outcome (ready or the failure's code).", ["outcome"]
)
PAGES = Counter("groundwork_ingested_pages", "Pages of documents made searchable.")
OCR_PAGES = Counter("groundwork_ocr_pages", "Pages whose text was read by OCR.")

UNRESOLVED_VIEW = "<unresolved>"


def http_request_observe(*, view: str, method: str, status: int, seconds: float) -> None:
    method = method if method in _METHODS else "other"
    HTTP_REQUESTS.labels(view=view, method=method, status=str(status)).inc()
    HTTP_LATENCY.labels(view=view).observe(seconds)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def chat_turn_observe(*, surface: str, outcome: str, seconds: float, first_token_seconds: float | None) -> None:
    CHAT_TURNS.labels(surface=surface, outcome=outcome).inc()
    CHAT_TURN_DURATION.labels(surface=surface).observe(seconds)
    if first_token_seconds is not None:
        CHAT_FIRST_TOKEN.labels(surface=surface).observe(first_token_seconds)


def credits_debited_observe(*, kind: str, model: str, tokens: int, credits: int) -> None:
    """Call once the debit is durable (on commit): a rolled-back charge was never made."""
    model = model or "none"
    if tokens:
        TOKENS.labels(kind=kind, model=model).inc(tokens)
    if credits:
        CREDITS.labels(kind=kind, model=model).inc(credits)


def document_ingested_observe(*, outcome: str, pages: int = 0, ocr_pages: int = 0) -> None:
    DOCUMENTS_INGESTED.labels(outcome=outcome).inc()
    if pages:
        PAGES.inc(pages)
    if ocr_pages:
        OCR_PAGES.inc(ocr_pages)


# --- gauges read at scrape time -------------------------------------------------------------

# A reader returns (label values, value) pairs; it may query PostgreSQL or Redis.
Reader = Callable[[], Iterable[tuple[tuple[str, ...], float]]]
_gauges: dict[str, tuple[str, tuple[str, ...], Reader]] = {}


def scrape_gauge(name: str, documentation: str, labels: tuple[str, ...], reader: Reader) -> None:
    """Register a gauge computed when /metrics is read (an app's ready() calls this)."""
    _gauges[name] = (documentation, labels, reader)


class ScrapeTimeCollector:
    """The registered gauges, read now. A reader that fails (PostgreSQL or Redis down) leaves
    its gauge out and sets groundwork_metrics_scrape_errors: the rest of the page still answers."""

    def collect(self):
        errors = GaugeMetricFamily(
            "groundwork_metrics_scrape_errors", "Scrape-time gauges that could not be read in this scrape."
        )
        failed = 0
        for name, (documentation, labels, reader) in sorted(_gauges.items()):
            family = GaugeMetricFamily(name, documentation, labels=list(labels))
            try:
                for label_values, value in reader():
                    family.add_metric(list(label_values), value)
            except Exception as exc:  # reported in the page, never raised into the scrape
                failed += 1
                logger.warning("metrics: could not read %s (%s)", name, exc.__class__.__name__)
                continue
            yield family
        errors.add_metric([], failed)
        yield errors


def exposition() -> tuple[bytes, str]:
    """The whole page in the Prometheus text format: (body, content type)."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    if MULTIPROC_DIR:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_Forward(REGISTRY))
    registry.register(ScrapeTimeCollector())
    return generate_latest(registry), CONTENT_TYPE_LATEST


class _Forward:
    def __init__(self, registry):
        self.registry = registry

    def collect(self):
        yield from self.registry.collect()


def process_dead(pid: int) -> None:
    """The supervisor calls this for each child that exited (prometheus_client's
    mark_process_dead: drops the live gauges' files of that process and of its job horses)."""
    if not MULTIPROC_DIR:
        return
    from prometheus_client import multiprocess

    for identifier in (pid, f"{pid}-jobs"):
        multiprocess.mark_process_dead(identifier, MULTIPROC_DIR)
