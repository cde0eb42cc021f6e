"""The ingestion pipeline: claim → parse (sandboxed) → chunk → embed (staged per batch) →
debit + publish in one transaction. Every step is idempotent per (document, revision)."""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import django_rq
import numpy as np
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Count, Sum
from django.utils import timezone
from rq import Retry

from billing import pricing, references
from billing.errors import BudgetExceeded, InsufficientCredits
from billing.models import Kind
from billing.selectors import ingest_credits_require
from billing.services import credits_debit
from core import metrics
from core.tenancy import account_context, dangerously_bypass_tenancy
from documents import images, progress
from documents.chunking import chunk_document, embedding_text
from documents.embedding import active_embedding_model, active_embedding_model_lock
from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError
from documents.language import SAMPLE_CHARS, language_detect, search_config_for
from documents.models import Chunk, Document, EmbeddingBatch, ReindexRun, Status
from documents.parsing import parse_in_sandbox
from documents.run_kinds import run_kind_for
from documents.storage import file_delete, local_copy
from llm import client as llm
from llm.embedding_tokens import input_tokens
from llm.error_codes import ProviderErrorCode
from llm.tokens import count_tokens

logger = logging.getLogger("groundwork.documents")

BATCH_SIZE = llm.EMBEDDING_BATCH_LIMIT  # one embedding request per batch
MAX_ATTEMPTS = 3

# The job id of every "ingest the next document" job starts with this, so the sweeper counts
# them from the queue's list of ids alone (documents/ingestion_queue.py). A retry keeps its id.
INGESTION_JOB_PREFIX = "ingest-next-"
INGEST_NEXT_JOB = "documents.jobs.ingest_next_document"
INGEST_JOB_TIMEOUT = 60 * 60  # rq kills a job past it (documents/jobs.py enqueues with it)
# A job sends no embedding request later than this before rq would kill it, leaving room for
# that request's EMBEDDING_TIMEOUT_SECONDS: a slow document is handed on to a new job instead
# (a job killed three times would fail its document as crashed).
JOB_MARGIN_SECONDS = 60


def ingest(*, account_id: int, document_id: int, revision: int) -> None:
    """Claim this revision of the document and ingest it (a reindex run's way, and the old
    per-document job's); uploads go through documents.ingestion_queue, which claims fairly."""
    document = claim(account_id, document_id, revision)
    if document is not None:
        process(document)


def process(document: Document) -> None:
    """Ingest a claimed (`processing`) revision: it ends ready, or failed with a reason."""
    document_id = document.pk
    deadline = time.monotonic() + INGEST_JOB_TIMEOUT - settings.EMBEDDING_TIMEOUT_SECONDS - JOB_MARGIN_SECONDS
    try:
        drafts = _parse_and_chunk(document)
        _check_credits(document, drafts)
        for attempt in range(2):
            batches = _embed_all(document, drafts, deadline=deadline)
            try:
                if _publish(document, drafts, batches):
                    metrics.document_ingested_observe(
                        outcome="ready", pages=_page_count(drafts), ocr_pages=getattr(document, "ocr_pages", 0)
                    )
                break
            except ModelChanged:
                # An embedding-model migration switched while this revision was embedded with
                # the old model: embed it again with the new one (once more at most).
                if attempt:
                    raise IngestionError(
                        DocumentErrorCode.EMBEDDING_MODEL_CHANGED,
                        "The embedding model changed while this document was processed; reindex it.",
                    ) from None
    except IngestionCancelled:
        return  # the reindex was cancelled: the cancel already put the document back
    except JobTimeUp:
        # Slow, not failing: a new job carries on at once with the batches staged so far.
        _requeue(document, retry_at=None, reason="", message=_handed_on_message(document))
        metrics.document_ingested_observe(outcome="handed_on")
    except IngestionError as exc:
        _fail(document, exc.code, exc.message)
        metrics.document_ingested_observe(outcome=str(exc.code))
    except (InsufficientCredits, BudgetExceeded) as exc:
        _fail(document, exc.code, exc.message)
        metrics.document_ingested_observe(outcome=str(exc.code))
    except llm.ProviderError as exc:
        if exc.transient:
            # Busy or unreachable after the job's own tries: not the document's fault, so it
            # waits in the queue (saying so) and is taken again by itself; only a permanent
            # refusal (400, 401/403, a wrong answer) fails it.
            _wait_for_provider(document, exc)
            metrics.document_ingested_observe(outcome="provider_waiting")
        else:
            _fail(document, exc.code, f"{exc.message} The document was not charged.")
            metrics.document_ingested_observe(outcome=str(exc.code))
    except (OperationalError, InterfaceError):
        # The database itself is unreachable: marking the document failed would fail too.
        # rq retries the job with backoff; the sweeper re-queues it if those run out.
        raise
    except Exception:
        logger.exception("ingestion of document %s failed unexpectedly", document_id)
        _fail(
            document,
            "internal_error",
            "Something went wrong while processing this document. It was not charged; reindex it to try again.",
        )
        metrics.document_ingested_observe(outcome="internal_error")


def claim(account_id, document_id, revision) -> Document | None:
    """Mark the revision processing, unless it is gone, superseded, done or given up on."""
    with account_context(account_id=account_id):
        document = Document.objects.for_account(account_id).visible().select_for_update().filter(pk=document_id).first()
        if document is None or document.revision != revision:
            return None
        if document.status in (Status.READY, Status.FAILED):
            return None
        if document.attempts >= MAX_ATTEMPTS:
            _set_failed(
                document,
                "processing_crashed",
                f"Processing stopped unexpectedly {MAX_ATTEMPTS} times. The file may be too large or "
                "complex; try a smaller or simpler file.",
            )
            return None
        document.status = Status.PROCESSING
        document.attempts += 1
        document.heartbeat_at = timezone.now()
        document.retry_at, document.wait_message = None, ""  # no longer waiting: being processed
        document.save(update_fields=["status", "attempts", "heartbeat_at", "retry_at", "wait_message", "updated_at"])
        return document


_claim = claim  # (the old name: bench/ingestion.py times the pipeline's steps by it)


def _uploader(document: Document) -> dict:
    """Who pays for the document's ingestion and reindexing (their budgets apply): the API key
    that uploaded it, else the member who did."""
    if document.uploaded_by_api_key_id:
        return {"api_key": document.uploaded_by_api_key_id}
    return {"user": document.uploaded_by_id}


class ModelChanged(Exception):
    """The staged vectors are not of the account's active embedding model (any more)."""


class IngestionCancelled(Exception):
    """The revision being embedded was cancelled (or superseded): stop, quietly."""


class JobTimeUp(Exception):
    """The job has no time left for another embedding request: hand the document on."""


def _parse_and_chunk(document: Document):
    with account_context(account_id=document.account_id):
        ingest_credits_require(account=document.account_id, **_uploader(document))
    with local_copy(document.file.name) as path:
        parsed = parse_in_sandbox(
            path,
            document.kind,
            timeout_s=images.parse_timeout_s(document.kind),
            memory_mb=images.parse_memory_mb(document.kind),
            filename=document.name,
            ocr_max_pages=settings.OCR_MAX_PAGES,
        )
        parsed.sections += images.image_description_sections(document, path, payer=_uploader(document))
    document.parse_notes = parsed.notes  # pages OCR skipped: shown with the ready document
    document.ocr_pages = len({s.page_start for s in parsed.sections if s.text_source == "ocr"})  # for /metrics
    drafts = chunk_document(parsed, size=settings.CHUNK_SIZE, overlap=settings.CHUNK_OVERLAP, count_tokens=count_tokens)
    if not drafts:
        raise IngestionError(
            DocumentErrorCode.NO_TEXT,
            images.MSG_IMAGE_NO_TEXT if images.is_image(document.kind) else "This file contains no text to search.",
        )
    title = parsed.title or document.name
    document.language = _language(drafts)
    pages = [d.page_end for d in drafts if d.page_end]
    document.title = title[:255]
    texts = _embedding_texts(document, drafts)
    with account_context(account_id=document.account_id):
        active = active_embedding_model(account_id=document.account_id)
        document.credits_estimate = credits_estimate(texts, model=active.model)
        Document.objects.for_account(document.account_id).filter(pk=document.pk).update(
            title=document.title,
            page_count=max(pages) if pages else None,
            credits_estimate=document.credits_estimate,
            progress_total=_batch_count(len(drafts)),
            chunks_total=len(drafts),
            heartbeat_at=timezone.now(),
        )
    return drafts


def _page_count(drafts) -> int:
    """Pages of a paged document (PDF, images), else 0: text files have no pages."""
    return max((d.page_end for d in drafts if d.page_end), default=0)


def _embedding_texts(document: Document, drafts) -> list[str]:
    """Exactly the texts sent to the embedding model, in order."""
    return [embedding_text(d, document.title or document.name) for d in drafts]


def credits_estimate(texts: list[str], *, model: str) -> int:
    """What embedding `texts` with `model` will cost, counted before any is sent: the tokens
    `model` reports for them (llm/embedding_tokens.py: its own tokenizer and prefix), summed
    and priced by billing.pricing, as the one debit of the document's tokens is."""
    return pricing.credits_for(kind=pricing.EMBEDDING, model=model, tokens=input_tokens(texts, model=model))


def _batch_count(n: int) -> int:
    return (n + BATCH_SIZE - 1) // BATCH_SIZE


def _check_credits(document: Document, drafts) -> None:
    """Refuse before embedding anything when the document's credits estimate (stored by
    _parse_and_chunk and shown while it processes) already exceeds the balance, or what the
    uploader's budgets have left (the uploader pays for ingestion, also for a reindex)."""
    with account_context(account_id=document.account_id):
        ingest_credits_require(account=document.account_id, estimate=document.credits_estimate, **_uploader(document))


def _embed_all(document: Document, drafts, *, deadline: float | None = None) -> list[EmbeddingBatch]:
    """Embed every batch not already staged for this revision, a few at a time, with the
    account's active embedding model (what its search compares); batches staged with another
    model (before a migration switched) are dropped and embedded again. No request starts
    after `deadline` (time.monotonic()): the batches in flight are staged, then JobTimeUp."""
    with account_context(account_id=document.account_id):
        active = active_embedding_model(account_id=document.account_id)
        staging = EmbeddingBatch.objects.for_account(document.account_id).filter(
            document=document, revision=document.revision
        )
        staging.exclude(model=active.model).delete()
        staged = dict(staging.values_list("batch_index", "count"))
        Document.objects.for_account(document.account_id).filter(pk=document.pk).update(
            chunks_embedded=sum(staged.values())
        )
    todo = [i for i in range(_batch_count(len(drafts))) if i not in staged]
    texts = _embedding_texts(document, drafts)
    started, embedded = time.monotonic(), 0

    def stage(index: int, result) -> None:
        nonlocal embedded
        _stage(document, index, result)
        embedded += len(result.vectors)
        progress.rate_record(active.model, chunks=embedded, seconds=time.monotonic() - started)

    def embed_batch(index: int):
        batch = texts[index * BATCH_SIZE : (index + 1) * BATCH_SIZE]
        return index, llm.with_retries(
            lambda: llm.embed(
                batch,
                model=active.model,
                dimensions=active.dimensions,
                purpose=llm.Purpose.PASSAGE,
                timeout=settings.EMBEDDING_TIMEOUT_SECONDS,
            ),
            tries=max(1, settings.EMBEDDING_RETRIES),
            first_delay=settings.EMBEDDING_RETRY_DELAY_SECONDS,
            deadline=deadline,
        )

    # At most EMBEDDING_CONCURRENCY batches in flight, each staged (and checked for a cancel)
    # before another starts: a cancel stops the embedding within that many requests.
    window = max(1, settings.EMBEDDING_CONCURRENCY)
    pool = ThreadPoolExecutor(max_workers=window)
    in_flight: deque = deque()
    out_of_time = False
    try:
        for index in todo:
            if len(in_flight) >= window:
                stage(*_awaited(document, in_flight.popleft()))
            if deadline is not None and time.monotonic() >= deadline:
                out_of_time = True
                break
            in_flight.append(pool.submit(embed_batch, index))
        while in_flight:
            stage(*_awaited(document, in_flight.popleft()))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if out_of_time:
        raise JobTimeUp()
    with account_context(account_id=document.account_id):
        return list(
            EmbeddingBatch.objects.for_account(document.account_id)
            .filter(document=document, revision=document.revision)
            .order_by("batch_index")
        )


def _awaited(document: Document, future):
    """The batch's result, the document's heartbeat kept fresh while it waits: a batch queued
    on a busy model server may wait far longer than DOCUMENT_STALE_SECONDS (up to
    EMBEDDING_TIMEOUT_SECONDS a try), and the sweeper must not take a waiting worker for a
    dead one (a second worker would embed the same document on the same busy cores)."""
    beat = max(0.5, settings.DOCUMENT_STALE_SECONDS / 4)
    while True:
        try:
            return future.result(timeout=beat)
        except TimeoutError:
            with account_context(account_id=document.account_id):
                Document.objects.for_account(document.account_id).filter(
                    pk=document.pk, revision=document.revision, status=Status.PROCESSING
                ).update(heartbeat_at=timezone.now())


def _stage(document: Document, index: int, result) -> None:
    """Stage one batch and report it as progress (per batch: a 300-chunk document moves in
    4 steps), unless the revision was cancelled or superseded meanwhile."""
    with account_context(account_id=document.account_id), transaction.atomic():
        # NOTE: the document row is locked as document_reindex_cancel locks it, so a cancel
        # either sees this batch (and deletes it) or this sees the cancel (and stops).
        if (
            not Document.objects.for_account(document.account_id)
            .select_for_update()
            .filter(pk=document.pk, revision=document.revision, status=Status.PROCESSING)
            .exists()
        ):
            raise IngestionCancelled()
        # NOTE: two runs of the same revision (a re-queued job overlapping a slow one) may
        # embed the same batch; the unique (document, revision, batch) key keeps one.
        EmbeddingBatch.objects.for_account(document.account_id).bulk_create(
            [
                EmbeddingBatch(
                    account_id=document.account_id,
                    document=document,
                    revision=document.revision,
                    batch_index=index,
                    vectors=result.vectors.astype(np.float32).tobytes(),
                    count=len(result.vectors),
                    tokens=result.total_tokens,
                    model=result.model,
                    provider=result.provider,
                )
            ],
            ignore_conflicts=True,
        )
        done = (
            EmbeddingBatch.objects.for_account(document.account_id)
            .filter(document=document, revision=document.revision)
            .aggregate(batches=Count("pk"), chunks=Sum("count"))
        )
        Document.objects.for_account(document.account_id).filter(pk=document.pk).update(
            progress_done=done["batches"], chunks_embedded=done["chunks"] or 0, heartbeat_at=timezone.now()
        )


def _language(drafts) -> str:
    """The document's language from the start of its text (documents/language.py)."""
    sample, size = [], 0
    for draft in drafts:
        if size >= SAMPLE_CHARS:
            break
        sample.append(draft.content)
        size += len(draft.content)
    return language_detect("\n".join(sample))


def _publish(document: Document, drafts, batches: list[EmbeddingBatch]) -> bool:
    """Debit the exact provider tokens and swap in the new chunks, all in one transaction.
    False: the revision was deleted or superseded meanwhile (nothing published)."""
    vectors = np.concatenate([np.frombuffer(bytes(b.vectors), dtype=np.float32).reshape(b.count, -1) for b in batches])
    if len(vectors) != len(drafts):
        raise IngestionError(
            DocumentErrorCode.INTERNAL_ERROR, "The staged embeddings do not match the chunks; reindex to retry."
        )
    tokens = sum(b.tokens for b in batches)
    account_id = document.account_id
    with account_context(account_id=account_id):
        # The active model's row first (FOR SHARE), then the document: the order the
        # migration's switch takes them in, so the two never deadlock; and the switch cannot
        # happen between this check and the commit.
        active = active_embedding_model_lock(account_id=account_id)
        if any(b.model != active.model for b in batches):
            raise ModelChanged()  # (_embed_all drops the other model's batches on the retry)
        current = Document.objects.for_account(account_id).select_for_update().filter(pk=document.pk).first()
        if current is None or current.revision != document.revision or current.status != Status.PROCESSING:
            return False  # deleted or superseded meanwhile: the newer job publishes
        entry = credits_debit(
            account=account_id,
            tokens=tokens,
            key=f"ingest:{document.pk}:{document.revision}",
            kind=Kind.EMBEDDING,
            model=batches[0].model,
            provider=batches[0].provider,
            reference=references.document(document.pk, document.revision),
            **_uploader(document),
        )
        chunks = Chunk.objects.for_account(account_id)
        chunks.filter(document=current).delete()
        ids = _reserve_chunk_ids(len(drafts))
        current.language = getattr(document, "language", "")
        current.search_config = search_config_for(current.language)
        created = chunks.bulk_create(
            [
                Chunk(
                    # NOTE: the document row is locked (select_for_update), as document_move locks it,
                    # so the chunks take the collection the document is in when they are published.
                    pk=ids[i],
                    account_id=account_id,
                    document=current,
                    collection_id=current.collection_id,
                    revision=current.revision,
                    chunk_index=d.index,
                    content=d.content,
                    token_count=d.token_count,
                    page_start=d.page_start,
                    page_end=d.page_end,
                    heading_path=d.heading_path,
                    text_source=d.text_source,
                    embedding=vectors[i],
                    embedding_model=batches[0].model,
                    search_config=current.search_config,
                    prev_chunk_id=ids[i - 1] if i > 0 else None,
                    next_chunk_id=ids[i + 1] if i + 1 < len(ids) else None,
                )
                for i, d in enumerate(drafts)
            ],
            batch_size=500,
        )
        EmbeddingBatch.objects.for_account(account_id).filter(document=current).delete()
        current.status = Status.READY
        current.error = current.error_code = ""
        if getattr(document, "parse_notes", None):  # read, but not every page (OCR limits)
            current.error, current.error_code = " ".join(document.parse_notes), "partly_read"
        current.chunk_count = len(created)
        current.token_count = sum(d.token_count for d in drafts)
        current.embedding_tokens = tokens
        current.credits_charged = -entry.delta + getattr(document, "vision_credits", 0)
        current.embedding_model = batches[0].model
        current.embedding_provider = batches[0].provider
        current.progress_done, current.chunks_embedded = current.progress_total, len(created)
        current.chunks_total = len(created)
        current.heartbeat_at = timezone.now()
        current.retry_at, current.wait_message, current.provider_waits = None, "", 0
        current.save()
    return True


def _reserve_chunk_ids(n: int) -> list[int]:
    """Ids for the new chunks, taken before the insert so each row is written once with its
    prev/next links (a second UPDATE pass would insert every row into the HNSW index again)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence('documents_chunk', 'id')) FROM generate_series(1, %s)", [n]
        )
        return [row[0] for row in cursor.fetchall()]


def _fail(document: Document, code: str, message: str) -> None:
    with account_context(account_id=document.account_id):
        current = (
            Document.objects.for_account(document.account_id)
            .visible()
            .select_for_update()
            .filter(pk=document.pk, revision=document.revision)
            .first()
        )
        if current is not None:
            _set_failed(current, code, message)
        EmbeddingBatch.objects.for_account(document.account_id).filter(
            document_id=document.pk, revision=document.revision
        ).delete()


def _set_failed(document: Document, code: str, message: str) -> None:
    document.status = Status.FAILED
    document.error_code = code[:40]
    document.error = message
    document.retry_at, document.wait_message = None, ""
    document.save(update_fields=["status", "error", "error_code", "retry_at", "wait_message", "updated_at"])


def provider_wait_seconds(waits: int) -> int:
    """How long a document waits in the queue after its `waits`-th transient provider failure:
    DOCUMENT_PROVIDER_RETRY_SECONDS, doubling each time, at most DOCUMENT_PROVIDER_RETRY_MAX_SECONDS."""
    first, most = settings.DOCUMENT_PROVIDER_RETRY_SECONDS, settings.DOCUMENT_PROVIDER_RETRY_MAX_SECONDS
    return int(min(most, first * 2 ** min(max(waits - 1, 0), 20)))


def _wait_for_provider(document: Document, exc: llm.ProviderError) -> None:
    """Hand the claimed revision back to the queue until the model server answers again:
    pending, with when it is taken next (`retry_at`, each wait longer) and why, and a job
    scheduled for then."""
    _requeue(document, retry_at=True, reason=exc.message, message="")


def _handed_on_message(document: Document) -> str:
    with account_context(account_id=document.account_id):
        done, total = (
            Document.objects.for_account(document.account_id)
            .filter(pk=document.pk)
            .values_list("progress_done", "progress_total")
            .first()
        ) or (0, 0)
    return (
        f"Still being indexed ({done} of {total} batches embedded): the model server is slow, "
        "so another job carries on with the rest now."
    )


def _requeue(document: Document, *, retry_at, reason: str, message: str) -> None:
    """The claimed revision back to `pending`, saying why (`wait_message`), with a job for it:
    `retry_at=True`, after the next, longer wait for the model server (a job scheduled then);
    None, at once (a job queued now). The batches staged so far stay (the next run embeds only
    the missing ones) and nothing was charged: the one debit, keyed by the revision, comes when
    it is published. Being sent back is no crashed attempt."""
    with account_context(account_id=document.account_id):
        current = (
            Document.objects.for_account(document.account_id)
            .visible()
            .select_for_update()
            .filter(pk=document.pk, revision=document.revision, status=Status.PROCESSING)
            .first()
        )
        if current is None:
            return  # cancelled, superseded or deleted meanwhile: nothing waits
        now = timezone.now()
        when = None
        if retry_at:
            current.provider_waits += 1
            when = now + dt.timedelta(seconds=provider_wait_seconds(current.provider_waits))
            message = (
                f"Waiting for the model server: {reason.rstrip('.')}. It will try again by itself at "
                f"{when:%H:%M:%S} UTC (wait {current.provider_waits}); nothing is charged until it is indexed."
            )
            logger.warning(
                "document %s waits for the model server until %s (%s)", document.pk, when.isoformat(), reason
            )
        current.status = Status.PENDING
        current.attempts = max(0, current.attempts - 1)
        current.retry_at = when
        current.heartbeat_at = now
        current.wait_message = message
        current.save(
            update_fields=[
                "status",
                "attempts",
                "retry_at",
                "heartbeat_at",
                "wait_message",
                "provider_waits",
                "updated_at",
            ]
        )
        transaction.on_commit(lambda: ingest_next_schedule(at=when), robust=True)


def ingest_next_schedule(*, at: dt.datetime | None) -> None:
    """An "ingest the next document, fairly" job: queued now (`at` None), or run by rq's
    scheduler at `at` (the workers run with --with-scheduler). The sweeper counts scheduled
    jobs as queued ones."""
    queue = django_rq.get_queue("default")
    options = dict(
        job_id=f"{INGESTION_JOB_PREFIX}{uuid.uuid4().hex}",
        job_timeout=INGEST_JOB_TIMEOUT,
        retry=Retry(max=3, interval=[10, 30, 90]),
    )
    if at is None:
        queue.enqueue(INGEST_NEXT_JOB, **options)
    else:
        queue.enqueue_at(at, INGEST_NEXT_JOB, **options)


def transient_failures_requeue(*, limit: int) -> list[Document]:
    """Documents that ended failed on a transient provider error (the model server busy or
    unreachable, before such errors made a document wait instead) get a new revision, pending
    again, oldest first, at most `limit` a call. Returns them (the caller queues their jobs).
    Each is retried once this way: from now on such an error makes it wait, never fail."""
    with dangerously_bypass_tenancy(reason="documents sweep: retry documents failed on a transient provider error"):
        found = list(
            Document.all_accounts.visible()
            .filter(status=Status.FAILED, error_code=ProviderErrorCode.PROVIDER_UNAVAILABLE)
            .order_by("updated_at", "pk")
            .values_list("pk", "account_id")[: max(0, limit)]
        )
    retried = []
    for document_id, account_id in found:
        with account_context(account_id=account_id):
            document = (
                Document.objects.for_account(account_id)
                .visible()
                .select_for_update(skip_locked=True)
                .filter(pk=document_id, status=Status.FAILED, error_code=ProviderErrorCode.PROVIDER_UNAVAILABLE)
                .first()
            )
            if document is None:
                continue
            document.revision += 1
            document.status = Status.PENDING
            document.attempts = document.provider_waits = 0
            document.error = document.error_code = ""
            document.progress_done = document.progress_total = 0
            document.retry_at = None
            document.wait_message = "The model server could not be reached earlier; trying again by itself."
            document.save()
            retried.append(document)
    return retried


def purge(*, account_id: int, document_id: int) -> None:
    with account_context(account_id=account_id):
        document = Document.objects.for_account(account_id).select_for_update().filter(pk=document_id).first()
        if document is None or document.status != Status.DELETING:
            return
        Chunk.objects.for_account(account_id).filter(document=document).delete()
        EmbeddingBatch.objects.for_account(account_id).filter(document=document).delete()
        name = document.file.name
        document.delete()
        transaction.on_commit(lambda: file_delete(name))


def reindex_run(*, account_id: int, run_id: int) -> None:
    """Reindex an account's documents one at a time (or run an embedding-model migration).

    Resumable: the run records the document it is at and the revision it gave it, so a run
    re-queued after its worker died finishes that revision (whose staged batches and
    per-revision charge key make the resumed ingestion embed and charge nothing twice)
    instead of starting another. Cancellable between documents and, through the cancel of
    the current document's reindex, between its embedding batches.
    """
    with account_context(account_id=account_id):
        run = ReindexRun.objects.for_account(account_id).filter(pk=run_id).first()
    owner = run_kind_for(run.kind) if run is not None else None
    if owner is not None:  # an embedding-model migration: retrieval's (documents/run_kinds.py)
        owner.run(account_id=account_id, run_id=run_id)
        return
    while True:
        with account_context(account_id=account_id):
            run = ReindexRun.objects.for_account(account_id).select_for_update().filter(pk=run_id).first()
            if run is None or run.status != ReindexRun.RunStatus.RUNNING:
                return
            if run.done >= run.total:
                run.status = ReindexRun.RunStatus.DONE
                run.finished_at = timezone.now()
                run.save(update_fields=["status", "finished_at"])
                return
            document_id = run.document_ids[run.done]
            if run.current_document_id == document_id and run.current_revision:
                revision = run.current_revision  # resumed: finish the revision this run started
            else:
                revision = _bump_revision(account_id, document_id)
                run.current_document_id, run.current_revision = document_id, revision
                run.heartbeat_at = timezone.now()
                run.save(update_fields=["current_document_id", "current_revision", "heartbeat_at"])
        if revision is not None:
            ingest(account_id=account_id, document_id=document_id, revision=revision)
        with account_context(account_id=account_id):
            ReindexRun.objects.for_account(account_id).filter(pk=run_id, status=ReindexRun.RunStatus.RUNNING).update(
                done=run.done + 1, heartbeat_at=timezone.now()
            )


def _bump_revision(account_id: int, document_id: int) -> int | None:
    """Start a new revision of one document for a reindex run (None: it was deleted).

    A document already at a revision that is pending/processing is left to that job.
    """
    document = Document.objects.for_account(account_id).visible().select_for_update().filter(pk=document_id).first()
    if document is None:
        return None
    if document.status in (Status.PENDING, Status.PROCESSING):
        return document.revision
    document.revision += 1
    document.status = Status.PENDING
    document.attempts = document.provider_waits = 0
    document.error = document.error_code = document.wait_message = ""
    document.retry_at = None
    document.progress_done = document.progress_total = 0
    document.save()
    return document.revision
