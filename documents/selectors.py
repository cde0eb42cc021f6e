"""Reads of documents and chunks. Every selector takes the account explicitly; a document
that is being deleted is gone for every reader at once (`DocumentQuerySet.visible()`)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.db.models.expressions import RawSQL

from core.errors import object_id
from documents.errors import CollectionNotFound, DocumentNotFound, ReindexRunNotFound
from documents.models import (
    RETRIEVABLE_BY_TAGS_SQL,
    VISIBLE_COLLECTION_IDS_SQL,
    Chunk,
    Collection,
    CollectionAccess,
    Document,
    ReindexRun,
)
from documents.tags import tags_filter

# --- collections ----------------------------------------------------------------------------
# Who sees which collection is decided in one place, the SQL function visible_collection_ids()
# (migration 0007), from the principal of the transaction (account_context's user / api_key):
# these selectors, search, chat retrieval and the row-level-security policy all ask it.


def collection_list(*, account) -> QuerySet[Collection]:
    """The account's collections that the transaction's principal may see, the default
    first, with their number of documents (not being deleted)."""
    return (
        Collection.objects.for_account(account)
        .filter(pk__in=RawSQL(f"SELECT unnest({VISIBLE_COLLECTION_IDS_SQL})", ()))
        .annotate(document_count=Count("documents", filter=~Q(documents__status="deleting")))
        .order_by("-is_default", "name", "pk")
    )


def collection_access_by_id(*, account, collection_id) -> Collection:
    """A collection the principal may see; CollectionNotFound (404) alike for a missing id,
    another account's, a malformed one and a restricted collection the principal may not see."""
    collection = collection_list(account=account).filter(pk=object_id(collection_id)).first()
    if collection is None:
        raise CollectionNotFound()
    return collection


def collection_default(*, account) -> Collection | None:
    return Collection.objects.for_account(account).filter(is_default=True).first()


def collection_ids_requested(*, account, requested) -> list[int] | None:
    """`requested` (a collection id, a list of them, or None from a request body or query)
    as the ids of collections the principal may see: None when nothing narrows; any id that
    is not one of them (missing, another account's, invisible, malformed) is a 404."""
    if requested in (None, "", []):
        return None
    values = requested if isinstance(requested, (list, tuple)) else [requested]
    ids = {object_id(v) for v in values}
    if None in ids or isinstance(requested, bool) or any(isinstance(v, bool) for v in values):
        raise CollectionNotFound()
    found = set(collection_list(account=account).filter(pk__in=ids).values_list("pk", flat=True))
    if found != ids:
        raise CollectionNotFound()
    return sorted(found)


def collection_access_list(*, account, collection: Collection) -> QuerySet[CollectionAccess]:
    return CollectionAccess.objects.for_account(account).filter(collection=collection).order_by("pk")


def collection_access_by_collection(*, account, collections) -> dict[int, list[CollectionAccess]]:
    """{collection id: its access rows} for several collections, in one query."""
    found: dict[int, list[CollectionAccess]] = {}
    rows = CollectionAccess.objects.for_account(account).filter(collection__in=[c.pk for c in collections])
    for row in rows.order_by("pk"):
        found.setdefault(row.collection_id, []).append(row)
    return found


def document_ids_readable(*, account, document_ids: Iterable[int]) -> set[int]:
    """Which of `document_ids` the principal may read now (for citations stored earlier)."""
    ids = {i for i in (object_id(d) for d in document_ids) if i is not None}
    if not ids:
        return set()
    return set(Document.objects.for_account(account).readable().filter(pk__in=ids).values_list("pk", flat=True))


def document_ids_retrievable(
    *, account, document_ids: Iterable[int], tags: list[str] | None = None, exclude_tags: list[str] | None = None
) -> set[int]:
    """Which of `document_ids` retrieval may read by their tags (RETRIEVABLE_BY_TAGS_SQL: not
    carrying one of the account's excluded tags or of `exclude_tags`; carrying one of `tags`
    when given). One query; it does not check readability (ask `readable()` for that)."""
    ids = sorted({i for i in (object_id(d) for d in document_ids) if i is not None})
    if not ids:
        return set()
    account_id = getattr(account, "pk", account)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT d.id FROM documents_document AS d WHERE d.account_id = %(account_id)s"
            f" AND d.id = ANY(%(ids)s::bigint[]) AND {RETRIEVABLE_BY_TAGS_SQL}",
            {
                "account_id": account_id,
                "ids": ids,
                "tags": tags_filter(tags, field="tags"),
                "exclude_tags": tags_filter(exclude_tags, field="exclude_tags") or [],
            },
        )
        return {row[0] for row in cursor.fetchall()}


# --- documents --------------------------------------------------------------------------------


def document_list(
    *,
    account,
    status: str | None = None,
    query: str | None = None,
    collection_ids: list[int] | None = None,
    tag: str | None = None,
) -> QuerySet[Document]:
    """The documents the principal may read (`readable()`: not being deleted, in a visible
    collection), newest first; `collection_ids` narrows to some of those collections, `tag`
    to those carrying it (as spelled, through the GIN index on tags)."""
    documents = (
        Document.objects.for_account(account).readable().select_related("collection").order_by("-created_at", "-pk")
    )
    if collection_ids is not None:
        documents = documents.filter(collection_id__in=collection_ids)
    if status:
        documents = documents.filter(status=status)
    if query:
        documents = documents.filter(name__icontains=query)
    if tag:
        documents = documents.filter(tags__contains=[tag.strip()])
    return documents


def document_access_by_id(*, account, document_id) -> Document:
    """The account's document `document_id`, for any reader (page, API, service).

    Raises DocumentNotFound (404) alike for a missing id, another account's id, a
    malformed id, a document being deleted and one in a collection the principal may not see: the answer tells nothing about other
    accounts.
    """
    document = (
        Document.objects.for_account(account)
        .readable()
        .select_related("collection")
        .filter(pk=object_id(document_id))
        .first()
    )
    if document is None:
        raise DocumentNotFound()
    return document


def chunk_list(*, account, document: Document) -> QuerySet[Chunk]:
    return (
        Chunk.objects.for_account(account)
        .filter(document=document, revision__lte=document.revision)
        .order_by("chunk_index")
        .defer("embedding", "search_vector")
    )


def reindex_run_access_by_id(*, account, run_id) -> ReindexRun:
    """The account's reindex run `run_id`; ReindexRunNotFound (404) alike for a missing id,
    another account's id and a malformed id."""
    run = ReindexRun.objects.for_account(account).filter(pk=object_id(run_id)).first()
    if run is None:
        raise ReindexRunNotFound()
    return run


def reindex_run_current(*, account) -> ReindexRun | None:
    return ReindexRun.objects.for_account(account).order_by("-created_at").first()
