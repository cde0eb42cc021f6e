"""Which embedding model an account searches with, and the migration to another one.

An account's search uses its ActiveEmbeddingModel: queries are embedded with it and compared
only with chunk vectors of it (retrieval/search/query.py filters on `embedding_model` and
the dimension). When EMBEDDING_MODEL / EMBEDDING_DIMENSIONS name another model, an owner or
admin sees the credit estimate on the Knowledge base and starts a migration (a ReindexRun of
kind "migration"):

- the job embeds every ready document's chunks with the new model, one batch at a time, into
  ChunkEmbedding (beside the vectors search uses); each batch's vectors and its charge
  (idempotency key per run, document revision and batch) are written in one transaction,
  so a killed worker resumes at the first batch not written and never pays twice;
- a document published meanwhile (with the active model) is picked up too: the migration
  ends only when every chunk of every ready document has a vector of the new model;
- then one transaction locks the account's ActiveEmbeddingModel row (publishing locks it
  too), moves the new vectors into the chunks, drops the old ones and the staging, and
  makes the new model active: searches before it compare old with old, after it new with
  new;
- cancelling deletes the staged vectors; the old model keeps serving.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from billing import pricing, references
from billing.errors import BudgetExceeded, InsufficientCredits
from billing.models import Kind
from billing.services import credits_debit
from core.tenancy import account_context
from documents.chunking import embedding_text
from documents.embedding import active_embedding_model
from documents.models import ActiveEmbeddingModel, Chunk, ChunkEmbedding, Document, ReindexRun, Status
from llm import client as llm
from retrieval.search.maintenance import ensure_dimension_vector_index, ensure_tenant_vector_index

logger = logging.getLogger("groundwork.documents")

BATCH_SIZE = llm.EMBEDDING_BATCH_LIMIT


@dataclass(frozen=True)
class ModelChange:
    """What the Knowledge base shows before a migration starts."""

    active_model: str
    active_dimensions: int
    target_model: str
    target_dimensions: int
    documents: int
    batches: int
    credits_estimate: int


def model_change(*, account) -> ModelChange | None:
    """The migration the settings ask for (None: the account already uses EMBEDDING_MODEL),
    with its cost counted from the provider tokens stored for each ready document."""
    account_id = getattr(account, "pk", account)
    active = active_embedding_model(account_id=account_id)
    target, dims = settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS
    if (active.model, active.dimensions) == (target, dims):
        return None
    documents = list(
        Document.objects.for_account(account_id)
        .filter(status=Status.READY)
        .values_list("chunk_count", "embedding_tokens", "credits_estimate")
    )
    # Each document's provider tokens as the target model will be charged for them; a document
    # without them (none stored) counts its credits estimate.
    estimate = sum(
        pricing.credits_for(kind=pricing.EMBEDDING, model=target, tokens=tokens) if tokens else (estimate or 0)
        for _count, tokens, estimate in documents
    )
    return ModelChange(
        active_model=active.model,
        active_dimensions=active.dimensions,
        target_model=target,
        target_dimensions=dims,
        documents=len(documents),
        batches=sum((c + BATCH_SIZE - 1) // BATCH_SIZE for c, _t, _e in documents),
        credits_estimate=max(estimate, pricing.MIN_CREDITS_PER_CALL) if documents else 0,
    )


def migration_cancel(*, account_id: int, run: ReindexRun) -> None:
    """Inside the caller's transaction, with `run` locked: drop what the run built."""
    ChunkEmbedding.objects.for_account(account_id).filter(model=run.embedding_model).delete()


def migration_run(*, account_id: int, run_id: int) -> None:
    """The job: batches until the new model covers every ready document, then the switch.
    Resumable (a re-queued run continues where the last one stopped) and cancellable."""
    with account_context(account_id=account_id):
        run = ReindexRun.objects.for_account(account_id).filter(pk=run_id).first()
    if run is not None and run.status == ReindexRun.RunStatus.RUNNING and not connection.in_atomic_block:
        # The new dimension's table-wide HNSW index, built (concurrently) before the switch
        # fills it. (Inside a test's transaction the build would wait for that transaction.)
        ensure_dimension_vector_index(run.embedding_dimensions)
    while migration_step(account_id=account_id, run_id=run_id):
        pass


def migration_step(*, account_id: int, run_id: int) -> bool:
    """One embedding batch of the migration, or the switch when nothing is left. Returns
    whether there is more to do."""
    with account_context(account_id=account_id):
        run = ReindexRun.objects.for_account(account_id).filter(pk=run_id).first()
        if run is None or run.status != ReindexRun.RunStatus.RUNNING:
            return False
        document = _next_document(account_id, run.embedding_model)
        if document is None:
            return not _switch(account_id, run_id)
        batch_index, chunks = _next_batch(account_id, document, run.embedding_model)
    try:
        result = llm.with_retries(
            lambda: llm.embed(
                # A chunk has the draft's content and heading_path: the same text as at ingestion.
                [embedding_text(c, document.title or document.name) for c in chunks],
                model=run.embedding_model,
                dimensions=run.embedding_dimensions,
                purpose=llm.Purpose.PASSAGE,
            )
        )
        with account_context(account_id=account_id):
            _store_batch(account_id, run_id, document, batch_index, chunks, result)
    except (llm.ProviderError, InsufficientCredits, BudgetExceeded) as exc:
        _stop(account_id, run_id, exc.message)
        return False
    return True


def _next_document(account_id: int, model: str) -> Document | None:
    """The first ready document with a chunk that has no vector of `model` yet."""
    return (
        Document.objects.for_account(account_id)
        .filter(status=Status.READY)
        .extra(
            where=[
                "documents_document.chunk_count > (SELECT count(*) FROM documents_chunkembedding AS e"
                " WHERE e.document_id = documents_document.id AND e.model = %s)"
            ],
            params=[model],
        )
        .order_by("pk")
        .first()
    )


def _next_batch(account_id: int, document: Document, model: str):
    """The first batch (chunk_index // BATCH_SIZE) of the document with a chunk not covered;
    batches are written whole, so its chunks are all uncovered."""
    missing = (
        Chunk.objects.for_account(account_id)
        .filter(document=document)
        .exclude(
            pk__in=ChunkEmbedding.objects.for_account(account_id)
            .filter(document=document, model=model)
            .values("chunk_id")
        )
        .order_by("chunk_index")
        .values_list("chunk_index", flat=True)
        .first()
    )
    batch_index = missing // BATCH_SIZE
    chunks = list(
        Chunk.objects.for_account(account_id)
        .filter(
            document=document, chunk_index__gte=batch_index * BATCH_SIZE, chunk_index__lt=(batch_index + 1) * BATCH_SIZE
        )
        .order_by("chunk_index")
        .only("pk", "chunk_index", "content", "heading_path", "revision")
    )
    return batch_index, chunks


@transaction.atomic
def _store_batch(account_id, run_id, document, batch_index, chunks, result) -> None:
    """The batch's vectors and its charge, in one transaction (or neither)."""
    run = ReindexRun.objects.for_account(account_id).select_for_update().filter(pk=run_id).first()
    if run is None or run.status != ReindexRun.RunStatus.RUNNING:
        return  # cancelled while the batch was embedded: nothing stored, nothing charged
    # NOTE: the document row is locked as _publish locks it, so its chunks cannot be swapped
    # for a new revision's between this check and the insert.
    current = Document.objects.for_account(account_id).select_for_update().filter(pk=document.pk).first()
    ids = {c.pk for c in chunks}
    if current is None or Chunk.objects.for_account(account_id).filter(pk__in=ids).count() != len(ids):
        return  # reindexed or deleted meanwhile: the next step looks again
    revision = chunks[0].revision
    entry = credits_debit(
        account=account_id,
        tokens=result.total_tokens,
        key=f"embedding-migration:{run.pk}:{document.pk}:{revision}:{batch_index}",
        kind=Kind.EMBEDDING,
        model=result.model,
        provider=result.provider,
        reference=references.document(document.pk, revision),
        user=run.created_by_id,
    )
    ChunkEmbedding.objects.for_account(account_id).bulk_create(
        [
            ChunkEmbedding(
                account_id=account_id,
                chunk_id=c.pk,
                document_id=document.pk,
                model=run.embedding_model,
                embedding=result.vectors[i],
            )
            for i, c in enumerate(chunks)
        ],
        ignore_conflicts=True,
    )
    run.progress_done = min(run.progress_done + 1, max(run.progress_total, run.progress_done + 1))
    run.progress_total = max(run.progress_total, run.progress_done)
    run.credits_charged += -entry.delta
    run.done = _covered_documents(account_id, run.embedding_model)
    run.heartbeat_at = timezone.now()
    run.save(update_fields=["progress_done", "progress_total", "credits_charged", "done", "heartbeat_at"])


def _covered_documents(account_id: int, model: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM documents_document AS d WHERE d.account_id = %s AND d.status = 'ready'"
            " AND d.chunk_count = (SELECT count(*) FROM documents_chunkembedding AS e"
            " WHERE e.document_id = d.id AND e.model = %s)",
            [account_id, model],
        )
        return int(cursor.fetchone()[0])


def _switch(account_id: int, run_id: int) -> bool:
    """Make the new model active, if it covers every ready document (else False: a document
    was published meanwhile and the run goes on)."""
    with account_context(account_id=account_id), transaction.atomic():
        run = ReindexRun.objects.for_account(account_id).select_for_update().filter(pk=run_id).first()
        if run is None or run.status != ReindexRun.RunStatus.RUNNING:
            return True
        active_embedding_model(account_id=account_id)
        active = ActiveEmbeddingModel.objects.for_account(account_id).select_for_update().get()
        if _next_document(account_id, run.embedding_model) is not None:
            return False
        covered = _covered_documents(account_id, run.embedding_model)
        with connection.cursor() as cursor:
            # Chunks of ready documents take their new vectors; those of documents being
            # processed or deleted keep the old model's, which search then never compares
            # (a processing document is re-embedded when it publishes: ingestion._publish).
            cursor.execute(
                "UPDATE documents_chunk AS c SET embedding = e.embedding, embedding_model = e.model"
                " FROM documents_chunkembedding AS e WHERE e.chunk_id = c.id AND e.model = %s"
                " AND e.account_id = %s AND c.account_id = %s",
                [run.embedding_model, account_id, account_id],
            )
        Document.objects.for_account(account_id).filter(status=Status.READY).update(embedding_model=run.embedding_model)
        ChunkEmbedding.objects.for_account(account_id).all().delete()
        active.model, active.dimensions, active.switched_at = (
            run.embedding_model,
            run.embedding_dimensions,
            timezone.now(),
        )
        active.save(update_fields=["model", "dimensions", "switched_at"])
        run.status = ReindexRun.RunStatus.DONE
        run.done = run.total = covered
        run.progress_done = run.progress_total
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "done", "total", "progress_done", "finished_at"])
    if not connection.in_atomic_block:
        try:
            ensure_tenant_vector_index(account_id)  # a large account's own index, for the new dimension
        except Exception:  # the cron job builds it later; search works meanwhile (table-wide index)
            logger.exception("per-account index after the embedding migration of account %s", account_id)
    return True


def _stop(account_id: int, run_id: int, message: str) -> None:
    with account_context(account_id=account_id), transaction.atomic():
        run = ReindexRun.objects.for_account(account_id).select_for_update().filter(pk=run_id).first()
        if run is None or run.status != ReindexRun.RunStatus.RUNNING:
            return
        run.status, run.error, run.finished_at = ReindexRun.RunStatus.FAILED, message, timezone.now()
        run.save(update_fields=["status", "error", "finished_at"])
        migration_cancel(account_id=account_id, run=run)
