"""Writes for sources: add one, ask for a sync, delete one (its documents go by a job)."""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record
from core.error_codes import CoreErrorCode
from documents.tags import tags_clean
from sources import jobs, sync_queue
from sources.error_codes import SourceErrorCode
from sources.errors import SourceError
from sources.kinds import kind_for, kind_names
from sources.models import (
    DEFAULT_MAX_PAGES,
    Schedule,
    Source,
    SourceStatus,
    SourceSync,
    SyncLane,
    SyncStatus,
)
from sources.sync import next_sync_after


def _clean_max_pages(value) -> int:
    if value is None:
        return DEFAULT_MAX_PAGES
    limit = settings.SOURCES_MAX_PAGES_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise SourceError(
            SourceErrorCode.INVALID_MAX_PAGES,
            f"`max_pages` must be a whole number from 1 to {limit}.",
            field="max_pages",
        )
    return value


def _clean_schedule(value) -> str:
    if value in (None, ""):
        return ""
    if value not in Schedule.values:
        raise SourceError(
            SourceErrorCode.INVALID_SCHEDULE, '`schedule` must be "hourly", "daily" or null.', field="schedule"
        )
    return value


def _target(source: Source) -> str:
    return f"{source.url} (source {source.pk})"


@transaction.atomic
def source_create(
    *, account, actor=None, api_key=None, kind, url, max_pages=None, schedule=None, options=None, tags=None
) -> Source:
    """Add a source and start its first sync. Everything is checked first (a 400 naming the
    field): the kind, the URL (its host resolved: a private, loopback or link-local address is
    refused unless SOURCES_ALLOWED_HOSTS allows the host on that port), max_pages, the
    schedule, options."""
    if kind not in kind_names():
        raise SourceError(
            CoreErrorCode.INVALID_KIND, f"`kind` must be one of: {', '.join(kind_names())}.", field="kind"
        )
    if not isinstance(url, str) or not url.strip() or len(url) > 2000:
        raise SourceError(
            SourceErrorCode.INVALID_URL, "Give the source's `url` (at most 2,000 characters).", field="url"
        )
    if options is not None and not isinstance(options, dict):
        raise SourceError(SourceErrorCode.INVALID_OPTION, "`options` must be an object.", field="options")
    max_pages, schedule, tags = _clean_max_pages(max_pages), _clean_schedule(schedule), tags_clean(tags)
    url, options = kind_for(kind).check(url=url.strip(), options=options or {})
    source = Source.objects.for_account(account).create(
        account=account,
        kind=kind,
        url=url,
        max_pages=max_pages,
        schedule=schedule,
        options=options,
        tags=tags,
        created_by=actor if getattr(actor, "pk", None) else None,
        created_by_api_key=api_key,
    )
    audit_record(
        account=account,
        action="source.create",
        actor=api_key or actor,
        target=_target(source),
        detail={"kind": kind, "max_pages": max_pages, "schedule": schedule or None},
    )
    source_sync_request(account=account, source=source, trigger="create")
    return source


@transaction.atomic
def source_sync_request(
    *, account, source: Source, trigger: str = "manual", actor=None, only_if_due: bool = False
) -> SourceSync | None:
    """Start a sync now (queued), unless one is running: then that one is returned. No two
    syncs of one source run at once (the row lock here, and one running sync per source as a
    unique constraint). `only_if_due` (the scheduler): None unless the source is still due."""
    source = Source.objects.for_account(account).select_for_update().filter(pk=source.pk).first()
    if source is None or source.deleted_at is not None:
        return None
    running = SourceSync.objects.for_account(account).filter(source=source, status=SyncStatus.RUNNING).first()
    now = timezone.now()
    if only_if_due and (running or not source.next_sync_at or source.next_sync_at > now):
        return None
    if running:
        return running
    try:
        with transaction.atomic():
            sync = SourceSync.objects.for_account(account).create(
                account_id=source.account_id, source=source, trigger=trigger
            )
    except IntegrityError:  # NOTE: unreachable under the row lock; the constraint is the backstop
        return SourceSync.objects.for_account(account).get(source=source, status=SyncStatus.RUNNING)
    source.status, source.error = SourceStatus.SYNCING, ""
    source.next_sync_at = next_sync_after(source, now)
    source.save(update_fields=["status", "error", "next_sync_at", "updated_at"])
    if trigger == "manual":
        audit_record(account=account, action="source.sync", actor=actor, target=_target(source))
    sync_queue.sync_queued(sync)
    jobs.enqueue_sync(sync)
    return sync


@transaction.atomic
def source_delete(*, account, source: Source, actor=None) -> Source:
    """Gone from lists at once (and a running sync stops at its next page); a job deletes
    its documents through documents' delete service, then the source and its history."""
    source = Source.objects.for_account(account).select_for_update().get(pk=source.pk)
    if source.deleted_at is None:
        source.deleted_at = timezone.now()
        source.save(update_fields=["deleted_at", "updated_at"])
        SourceSync.objects.for_account(account).filter(source=source, status=SyncStatus.RUNNING).update(
            status=SyncStatus.FAILED, finished_at=source.deleted_at, error="The source was deleted."
        )
        audit_record(account=account, action="source.delete", actor=actor, target=_target(source))
    jobs.enqueue_purge(source)
    return source


def account_sources_withdraw(sender, *, account, **kwargs) -> None:
    """Receiver of accounts.signals.account_deleted (in its transaction): the account's
    sources go, so no schedule syncs them again and a running sync stops at its next item
    (documents purges the documents themselves)."""
    Source.objects.for_account(account).delete()
    SyncLane.objects.for_account(account).delete()
