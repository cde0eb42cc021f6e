"""Reads of sources. Every selector takes the account explicitly; a deleted source (its
documents being removed by a job) is gone for every reader at once."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery

from core.errors import object_id
from core.tenancy import current_account_id
from sources.errors import SourceNotFound
from sources.models import Source, SourceItem, SourceSync, SyncStatus


def source_list(*, account) -> QuerySet[Source]:
    """The account's sources, newest first, each with `document_count` and `last_sync_id`
    (its latest finished sync)."""
    last_sync = (
        SourceSync.objects.for_account(account)
        .filter(source=OuterRef("pk"))
        .exclude(status=SyncStatus.RUNNING)
        .order_by("-started_at", "-pk")
        .values("pk")[:1]
    )
    return (
        Source.objects.for_account(account)
        .filter(deleted_at__isnull=True)
        .annotate(
            document_count=Count(
                "items", filter=Q(items__document__isnull=False) & ~Q(items__document__status="deleting")
            ),
            last_sync_id=Subquery(last_sync),
        )
        .order_by("-created_at", "-pk")
    )


def source_access_by_id(*, account, source_id) -> Source:
    """A source of the account; SourceNotFound (404) alike for a missing id, another
    account's, a deleted one and a malformed one."""
    source = source_list(account=account).filter(pk=object_id(source_id)).first()
    if source is None:
        raise SourceNotFound()
    return source


def syncs_by_id(*, account, ids: Iterable[int]) -> dict[int, SourceSync]:
    ids = [i for i in ids if i]
    return {s.pk: s for s in SourceSync.objects.for_account(account).filter(pk__in=ids)} if ids else {}


def sync_list(*, account, source: Source, limit: int = 20) -> QuerySet[SourceSync]:
    """A source's sync history, newest first."""
    return SourceSync.objects.for_account(account).filter(source=source).order_by("-started_at", "-pk")[:limit]


def sources_of_documents(*, account, document_ids: Iterable[int]) -> dict[int, dict]:
    """{document id: {"id", "url"}} for the documents a source brought in (the document
    API's `source`)."""
    rows = (
        SourceItem.objects.for_account(account)
        .filter(document_id__in=list(document_ids), source__deleted_at__isnull=True, owns_document=True)
        .values_list("document_id", "source_id", "url")
    )
    return {document_id: {"id": source_id, "url": url} for document_id, source_id, url in rows}


def sources_of_current_account(document_ids: Iterable[int]) -> dict[int, dict]:
    """documents.source_links' lookup: `sources_of_documents` in the unit of work's account
    (none outside one)."""
    account_id = current_account_id()
    return sources_of_documents(account=account_id, document_ids=document_ids) if account_id else {}
