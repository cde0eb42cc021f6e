"""A web source of 200 generated pages synced, then synced again after 10 pages changed, then
again with nothing changed: time (the sync itself, and the ingestion it queued), requests
answered 200 and 304, documents added/updated/unchanged, chunks embedded and credits charged.
A re-sync should embed and charge only the changed pages.

The site is served on loopback by the tests' LoopbackSite (ETag and Last-Modified on), the
jobs run in this process with rq's SimpleWorker, as the tests' run_jobs does. Embeddings come
from the bundled local model server (`python -m llm.local_server`, the product's default) or,
with BENCH_SOURCES_FAKE=1, from the tests' fake OpenAI-compatible server (no model cost: the
pipeline's own time). BENCH_SOURCES_PAGES / BENCH_SOURCES_CHANGED change the sizes.
"""

from __future__ import annotations

import contextlib
import os
import random
import time

from django.conf import settings

PAGES = int(os.environ.get("BENCH_SOURCES_PAGES", "200"))
CHANGED = int(os.environ.get("BENCH_SOURCES_CHANGED", "10"))
FAKE = os.environ.get("BENCH_SOURCES_FAKE", "") == "1"
WORDS = [
    "leave",
    "holiday",
    "expenses",
    "receipts",
    "travel",
    "laptop",
    "security",
    "badge",
    "office",
    "payroll",
    "pension",
    "team",
    "lead",
    "manager",
    "approval",
    "policy",
    "request",
    "week",
    "month",
    "year",
    "day",
    "remote",
    "onboarding",
    "training",
    "budget",
]


def _prose(seed: int, sentences: int = 12) -> str:
    rng = random.Random(seed)
    return "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(14)).capitalize() + "." for _ in range(sentences))


def _site(site, *, revision: dict[int, int]) -> None:
    from sources.tests.site import page

    links = [f"/handbook/page-{n}" for n in range(1, PAGES)]
    site.set("/handbook/", page("Handbook", "The staff handbook, all of it.", links))
    for n in range(1, PAGES):
        site.set(f"/handbook/page-{n}", page(f"Page {n}", _prose(n * 1000 + revision.get(n, 0))))


def _run_jobs(queue) -> tuple[float, float]:
    """(seconds in the sync job, seconds in the ingestion and delete jobs it queued)."""
    from rq import SimpleWorker

    worker = SimpleWorker([queue], connection=queue.connection)
    started = time.perf_counter()
    worker.work(burst=True, max_jobs=1)  # the sync: its uploads queue ingestion jobs
    sync_s = time.perf_counter() - started
    started = time.perf_counter()
    worker.work(burst=True)
    return sync_s, time.perf_counter() - started


def _phase(account, site, queue, *, start) -> dict:
    """Run `start()` (it returns the source's id), then the jobs it queued; what it cost."""
    from billing.selectors import ledger_list
    from core.tenancy import account_context
    from documents.models import Document
    from sources.models import SourceSync

    log_before = len(site.log)
    with account_context(account):
        ledger_before = set(ledger_list(account=account, kind="embedding").values_list("pk", flat=True))
        newest_document = Document.objects.for_account(account).order_by("-pk").values_list("pk", flat=True).first()
        source_id = start()
    sync_s, ingest_s = _run_jobs(queue)
    with account_context(account):
        sync = SourceSync.objects.for_account(account).filter(source_id=source_id).order_by("-pk").first()
        entries = list(ledger_list(account=account, kind="embedding").exclude(pk__in=ledger_before))
        credits = -sum(e.delta for e in entries)
        # Each embedding charge is one document revision ("ingest:<document>:<revision>"):
        # the chunks embedded are those revisions' chunks (new documents and changed pages).
        embedded = {int(e.idempotency_key.split(":")[1]) for e in entries if e.idempotency_key.startswith("ingest:")}
        chunks = sum(
            Document.objects.for_account(account).filter(pk__in=embedded).values_list("chunk_count", flat=True)
        )
        new_documents = Document.objects.for_account(account).filter(pk__gt=newest_document or 0)
        failed = new_documents.filter(status="failed").count()
    answers = [status for _, _, status in site.log[log_before:]]
    return {
        "sync_s": round(sync_s, 2),
        "ingestion_s": round(ingest_s, 2),
        "status": sync.status,
        "added": sync.added,
        "updated": sync.updated,
        "removed": sync.removed,
        "unchanged": sync.unchanged,
        "http_200": answers.count(200),
        "http_304": answers.count(304),
        "chunks_embedded": chunks,
        "documents_failed": failed,
        "credits": credits,
        "source_id": source_id,
    }


@contextlib.contextmanager
def _embeddings():
    if FAKE:
        from llm.fake_server import FakeOpenAIServer

        with FakeOpenAIServer() as server:
            yield server.base_url, "fake OpenAI-compatible server (tests')"
        return
    from bench.ingestion import LocalModels

    with LocalModels() as local:
        yield local.base_url, f"bundled local models ({settings.EMBEDDING_MODEL})"


def run() -> dict:
    import django_rq

    from accounts.models import User
    from accounts.services import account_create
    from core.tenancy import account_context
    from sources.models import Source
    from sources.services import source_create, source_sync_request
    from sources.tests.site import LoopbackSite

    settings.SOURCES_ALLOWED_HOSTS = ["127.0.0.1"]
    queue = django_rq.get_queue("default")
    queue.empty()
    with _embeddings() as (base_url, embedder), LoopbackSite() as site:
        settings.LLM_BASE_URL, settings.LLM_BUNDLED = base_url, False
        owner = User.objects.create_user(email=f"bench-sources-{time.time_ns()}@bench.test", password=None)
        account = account_create(name="bench sources", owner=owner, initial_credits=100_000_000)
        revision: dict[int, int] = {}
        _site(site, revision=revision)

        def create():
            return source_create(
                account=account, actor=owner, kind="web", url=site.url("/handbook/"), max_pages=PAGES
            ).pk

        first = _phase(account, site, queue, start=create)
        source_id = first.pop("source_id")

        for n in random.Random(7).sample(range(1, PAGES), CHANGED):
            revision[n] = 1
        _site(site, revision=revision)

        def sync():
            source = Source.objects.for_account(account).get(pk=source_id)
            source_sync_request(account=account, source=source)
            return source_id

        changed = _phase(account, site, queue, start=sync)
        unchanged = _phase(account, site, queue, start=sync)
        changed.pop("source_id"), unchanged.pop("source_id")
        with account_context(account):
            documents = Source.objects.for_account(account).get(pk=source_id).items.count()
    return {
        "pages": PAGES,
        "changed_pages": CHANGED,
        "documents": documents,
        "embeddings": embedder,
        "first_sync": first,
        f"resync_after_{CHANGED}_changed": changed,
        "resync_nothing_changed": unchanged,
        "settings": f"CHUNK_SIZE={settings.CHUNK_SIZE}, CHUNK_OVERLAP={settings.CHUNK_OVERLAP}, "
        f"EMBEDDING_CONCURRENCY={settings.EMBEDDING_CONCURRENCY}, "
        f"CREDITS_PER_1K_TOKENS={settings.CREDITS_PER_1K_TOKENS}",
    }
