"""Reads of documents and chunks. Every selector takes the account explicitly; a document
that is being deleted is gone for every reader at once."""
from __future__ import annotations

from django.db.models import QuerySet

from documents.models import Chunk, Document, ReindexRun, Status


def document_list(*, account, status: str | None = None, query: str | None = None) -> QuerySet[Document]:
    documents = Document.objects.for_account(account).exclude(status=Status.DELETING).order_by("-created_at", "-pk")
    if status:
        documents = documents.filter(status=status)
    if query:
        documents = documents.filter(name__icontains=query)
    return documents


def document_get(*, account, document_id) -> Document | None:
    """The account's document, or None for missing *and* for another account's id."""
    try:
        document_id = int(document_id)
    except (TypeError, ValueError):
        return None
    return document_list(account=account).filter(pk=document_id).first()


def chunk_list(*, account, document: Document) -> QuerySet[Chunk]:
    return (Chunk.objects.for_account(account).filter(document=document, revision__lte=document.revision)
            .order_by("chunk_index").defer("embedding", "search_vector"))


def reindex_run_get(*, account, run_id) -> ReindexRun | None:
    try:
        return ReindexRun.objects.for_account(account).filter(pk=int(run_id)).first()
    except (TypeError, ValueError):
        return None


def reindex_run_current(*, account) -> ReindexRun | None:
    return ReindexRun.objects.for_account(account).order_by("-created_at").first()
