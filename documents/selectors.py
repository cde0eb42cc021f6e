"""Reads of documents and chunks. Every selector takes the account explicitly; a document
that is being deleted is gone for every reader at once (`DocumentQuerySet.visible()`)."""
from __future__ import annotations

from django.db.models import QuerySet

from documents.errors import DocumentNotFound, ReindexRunNotFound
from documents.models import Chunk, Document, ReindexRun


def document_list(*, account, status: str | None = None, query: str | None = None) -> QuerySet[Document]:
    documents = Document.objects.for_account(account).visible().order_by("-created_at", "-pk")
    if status:
        documents = documents.filter(status=status)
    if query:
        documents = documents.filter(name__icontains=query)
    return documents


def _id(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def document_access_by_id(*, account, document_id) -> Document:
    """The account's document `document_id`, for any reader (page, API, service).

    Raises DocumentNotFound (404) alike for a missing id, another account's id, a
    malformed id and a document being deleted: the answer tells nothing about other
    accounts.
    """
    document = Document.objects.for_account(account).visible().filter(pk=_id(document_id)).first()
    if document is None:
        raise DocumentNotFound()
    return document


def chunk_list(*, account, document: Document) -> QuerySet[Chunk]:
    return (Chunk.objects.for_account(account).filter(document=document, revision__lte=document.revision)
            .order_by("chunk_index").defer("embedding", "search_vector"))


def reindex_run_access_by_id(*, account, run_id) -> ReindexRun:
    """The account's reindex run `run_id`; ReindexRunNotFound (404) alike for a missing id,
    another account's id and a malformed id."""
    run = ReindexRun.objects.for_account(account).filter(pk=_id(run_id)).first()
    if run is None:
        raise ReindexRunNotFound()
    return run


def reindex_run_current(*, account) -> ReindexRun | None:
    return ReindexRun.objects.for_account(account).order_by("-created_at").first()
