"""django-rq entry points for documents: thin, take ids, re-fetch, call the pipeline.

Enqueued with transaction.on_commit, never inside an open transaction.
"""
from __future__ import annotations

import logging

import django_rq
from rq import Retry
from django.db import transaction

logger = logging.getLogger("groundwork.documents")

JOB_TIMEOUT = 60 * 60


def _enqueue(func, **kwargs) -> None:
    # Retries cover a database that is briefly unreachable; everything else is handled
    # (and reported on the document) inside the job.
    retry = Retry(max=3, interval=[10, 30, 90])
    transaction.on_commit(lambda: django_rq.get_queue("default").enqueue(
        func, job_timeout=JOB_TIMEOUT, retry=retry, **kwargs))


def enqueue_ingest(document) -> None:
    _enqueue(ingest_document, document_id=document.pk, revision=document.revision, account_id=document.account_id)


def enqueue_delete(document) -> None:
    _enqueue(delete_document, document_id=document.pk, account_id=document.account_id)


def enqueue_reindex_run(run) -> None:
    _enqueue(reindex_account, run_id=run.pk, account_id=run.account_id)


def ingest_document(*, document_id: int, revision: int, account_id: int) -> None:
    """Parse, chunk, embed and publish one revision of a document. Safe to run twice."""
    from documents.ingestion import ingest

    ingest(account_id=account_id, document_id=document_id, revision=revision)


def delete_document(*, document_id: int, account_id: int) -> None:
    """Remove a deleted document's chunks, staging and stored file. Idempotent."""
    from documents.ingestion import purge

    purge(account_id=account_id, document_id=document_id)


def reindex_account(*, run_id: int, account_id: int) -> None:
    """Re-embed an account's documents one by one; resumable, cancellable."""
    from documents.ingestion import reindex_run

    reindex_run(account_id=account_id, run_id=run_id)


def requeue_stale_work() -> int:
    """Cron: re-queue documents and reindex runs whose worker died (stale heartbeat)."""
    from documents.ingestion import requeue_stale

    return requeue_stale()


def refresh_search_indexes() -> dict[int, str]:
    """Cron: give each large account its own HNSW index, drop those of accounts that shrank.

    Looks only at accounts near or past the threshold and at accounts that have an index.
    Runs outside any transaction, so indexes are built CONCURRENTLY (search and ingestion
    carry on meanwhile).
    """
    from django.conf import settings
    from django.db import connection

    from core.tenancy import dangerously_bypass_tenancy
    from documents.models import Document, Status
    from documents.search import TENANT_INDEX_MIN_CHUNKS, ensure_tenant_vector_index
    from django.db.models import Sum

    threshold = int(getattr(settings, "SEARCH_TENANT_INDEX_MIN_CHUNKS", TENANT_INDEX_MIN_CHUNKS))
    with dangerously_bypass_tenancy(reason="search maintenance: accounts near the per-account index threshold"):
        large = set(Document.all_accounts.exclude(status=Status.DELETING).values("account_id")
                    .annotate(chunks=Sum("chunk_count")).filter(chunks__gt=threshold // 2)
                    .values_list("account_id", flat=True))
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'documents_chunk'"
                           " AND indexname LIKE 'chunk_embedding_hnsw_a%%'")
            indexed = {int(name.rsplit("_a", 1)[1]) for (name,) in cursor.fetchall()}
    return {account_id: ensure_tenant_vector_index(account_id) for account_id in sorted(large | indexed)}
