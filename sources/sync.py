"""A source's sync, the same for every kind (docs/architecture.md, "A sync's path"):

    claim the sync -> the kind's reader lists items and fetches each with the last validators
      -> Unchanged (304, or the same text by sha256): nothing uploaded, nothing charged
      -> Content, new or changed: documents.services.document_upload (the upload path; the
         normal ingestion embeds and charges it once), the replaced document deleted
      -> Gone, or not listed any more: its document deleted (documents.services.document_delete)
    -> counts and problems into the history; the source idle, or failed with a reason

Each item is its own short unit of work (an account context), taken under the source's row
lock, so a DELETE of the source (which takes the same lock) stops the sync between items.
Nothing is fetched inside a transaction.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections import Counter

from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from accounts.models import Membership
from core.errors import GroundworkError
from core.tenancy import account_context, dangerously_bypass_tenancy
from documents.errors import UploadRejected
from documents.models import Document
from documents.revisions import document_content_replace
from documents.services import document_delete, document_upload
from sources.kinds import Content, Gone, Known, Skipped, Unchanged, kind_for
from sources.models import (
    Schedule,
    Source,
    SourceItem,
    SourceStatus,
    SourceSync,
    SyncStatus,
)

logger = logging.getLogger("groundwork.sources")

INTERVALS = {Schedule.HOURLY: dt.timedelta(hours=1), Schedule.DAILY: dt.timedelta(days=1)}
MAX_PROBLEMS = 50
UNEXPECTED = "The sync stopped on an unexpected error. Try again; if it keeps failing, tell your operator."


class _SourceDeleted(Exception):
    """The source was deleted while it synced: stop quietly."""


def next_sync_after(source: Source, when) -> dt.datetime | None:
    interval = INTERVALS.get(source.schedule)
    return when + interval if interval else None


def _principal(source: Source) -> dict:
    """The sync acts as whoever added the source (their budgets limit what it ingests), while
    they still may: a key revoked, or a member who left, and it acts as the system."""
    key = source.created_by_api_key
    if key is not None:
        return {"api_key": key} if key.revoked_at is None else {}
    user = source.created_by
    if user is not None and Membership.objects.for_account(source.account_id).filter(user=user).exists():
        return {"user": user}
    return {}


def sync_run(*, account_id: int, sync_id: int) -> None:
    """Run one named sync to its end. A sync that is finished, or that another worker is
    running (a heartbeat fresher than SOURCES_SYNC_STALE_SECONDS), is left alone."""
    claimed = _claim(account_id, sync_id, taken=False)
    if claimed is not None:
        _run(account_id, sync_id, *claimed[1:])


def sync_run_claimed(*, account_id: int, sync_id: int) -> None:
    """Run to its end a sync the fair claim took for this worker (sources/sync_queue.py);
    one finished or deleted meanwhile is left alone."""
    claimed = _claim(account_id, sync_id, taken=True)
    if claimed is not None:
        _run(account_id, sync_id, *claimed[1:])


def _run(account_id: int, sync_id: int, source: Source, known: dict[str, Known], principal: dict) -> None:
    counts, problems = Counter(), []
    reader = None
    try:
        reader = kind_for(source.kind).open(source, known=known)
        seen, complete = set(), True
        for key in reader.list_items():
            fetched = reader.fetch_item(key)
            if reader.bytes_fetched > settings.SOURCES_MAX_SYNC_BYTES:
                problems.append(
                    f"Stopped after {settings.SOURCES_MAX_SYNC_BYTES // (1024 * 1024):,} MB "
                    "(SOURCES_MAX_SYNC_BYTES); pages not reached were kept as they were."
                )
                complete = False
                break
            if not isinstance(fetched, Gone):
                seen.add(key)
            if isinstance(fetched, Skipped):
                problems.append(fetched.problem)
            outcome, problem = _apply(
                account_id, source, sync_id, fetched, principal=principal, bytes_fetched=reader.bytes_fetched
            )
            counts[outcome] += 1
            if problem:
                problems.append(problem)
        if complete:
            counts["removed"] += _remove_unseen(account_id, source, sync_id, seen, principal=principal)
        _finish(account_id, sync_id, counts, problems, error="")
    except _SourceDeleted:
        return
    except GroundworkError as exc:
        _finish(account_id, sync_id, counts, problems, error=exc.message)
    except Exception:
        logger.exception("sync %s of source %s failed", sync_id, source.pk)
        _finish(account_id, sync_id, counts, problems, error=UNEXPECTED)
    finally:
        if reader is not None:
            reader.close()


def _claim(account_id: int, sync_id: int, *, taken: bool):
    """(sync, source, known items, principal) of a sync to run now, its heartbeat refreshed;
    None when it is not to run. `taken`: the fair claim gave it to this worker."""
    with account_context(account_id=account_id):
        sync = (
            SourceSync.objects.for_account(account_id)
            .select_for_update(of=("self",))
            .select_related("source", "source__account", "source__created_by", "source__created_by_api_key")
            .filter(pk=sync_id)
            .first()
        )
        if sync is None or sync.status != SyncStatus.RUNNING or sync.source.deleted_at is not None:
            return None
        now = timezone.now()
        if (
            not taken
            and sync.heartbeat_at
            and now - sync.heartbeat_at < dt.timedelta(seconds=settings.SOURCES_SYNC_STALE_SECONDS)
        ):
            return None  # NOTE: a second job of the same sync (a retry): the first is running it
        sync.heartbeat_at = now
        sync.save(update_fields=["heartbeat_at"])
        known = {
            item.key: Known(
                etag=item.etag, last_modified=item.last_modified, sha256=item.sha256, links=tuple(item.links)
            )
            for item in SourceItem.objects.for_account(account_id).filter(source=sync.source)
        }
        return sync, sync.source, known, _principal(sync.source)


def _locked_source(account_id: int, source: Source, sync_id: int, bytes_fetched: int = 0) -> Source:
    """The source under its row lock (a DELETE waits for this item, or this item for the
    DELETE), with the sync's heartbeat refreshed."""
    locked = (
        Source.objects.for_account(account_id)
        .select_for_update(of=("self",))
        .select_related("account", "created_by")
        .filter(pk=source.pk)
        .first()
    )
    if locked is None or locked.deleted_at is not None:
        raise _SourceDeleted()
    SourceSync.objects.for_account(account_id).filter(pk=sync_id).update(
        heartbeat_at=timezone.now(), bytes_fetched=bytes_fetched
    )
    return locked


def _apply(
    account_id: int, source: Source, sync_id: int, fetched, *, principal: dict, bytes_fetched: int
) -> tuple[str, str]:
    """One fetched item into the knowledge base: (outcome, problem)."""
    with account_context(account_id=account_id, **principal):
        source = _locked_source(account_id, source, sync_id, bytes_fetched)
        item = SourceItem.objects.for_account(account_id).filter(source=source, key=fetched.key).first()
        if isinstance(fetched, Skipped):
            return ("unchanged" if item else "skipped"), ""
        if isinstance(fetched, Gone):
            if item is None:
                return "skipped", ""
            _item_remove(source.account, item)
            return "removed", ""
        if isinstance(fetched, Unchanged):
            if item is None:
                return "skipped", ""
            item.etag, item.last_modified = fetched.etag, fetched.last_modified
            item.save(update_fields=["etag", "last_modified", "updated_at"])
            return "unchanged", ""
        return _content_apply(account_id, source, item, fetched, actor=principal.get("user"))


def _document_alive(account_id: int, document_id: int | None) -> bool:
    return bool(document_id) and Document.objects.for_account(account_id).visible().filter(pk=document_id).exists()


def _content_apply(
    account_id: int, source: Source, item: SourceItem | None, fetched: Content, *, actor
) -> tuple[str, str]:
    sha256 = hashlib.sha256(fetched.data).hexdigest()
    fields = {
        "etag": fetched.etag[:500],
        "last_modified": fetched.last_modified[:100],
        "url": fetched.url[:2000],
        "title": fetched.title[:255],
        "links": fetched.links,
    }
    if item is not None and item.sha256 == sha256 and _document_alive(account_id, item.document_id):
        _item_update(item, **fields)
        return "unchanged", ""
    upload = SimpleUploadedFile(fetched.filename, fetched.data, content_type=fetched.content_type)
    try:
        document, created = _document_write(source, item, upload, actor=actor)
    except UploadRejected as exc:
        if exc.status in (402, 403):
            raise
        return ("unchanged" if item else "skipped"), f"{fetched.url}: {exc.message}"
    outcome = "added" if item is None else "updated"
    if item is None:
        item = SourceItem(account_id=account_id, source=source, key=fetched.key)
    elif item.document_id and item.document_id != document.pk:
        _document_release(source.account, item)
    owns = created or (item.document_id == document.pk and item.owns_document)
    _item_update(item, document=document, owns_document=owns, sha256=sha256, **fields)
    return outcome, ""


def _document_write(source: Source, item: SourceItem | None, upload, *, actor) -> tuple[Document, bool]:
    """(document, created): a changed item's own document gets the new content as its next
    revision (it keeps its id and tags, a person's edits included; search answers from the old
    chunks until the new are published); anything else is an upload carrying the source's
    tags, which may find the same bytes already there."""
    if item is not None and item.owns_document and _document_alive(source.account_id, item.document_id):
        document = Document.objects.for_account(source.account_id).get(pk=item.document_id)
        replaced = document_content_replace(account=source.account, document=document, upload=upload)
        if replaced is not None:
            return replaced, False
        upload.seek(0)
    return document_upload(account=source.account, actor=actor, upload=upload, tags=source.tags)


def _item_update(item: SourceItem, **fields) -> None:
    for name, value in fields.items():
        setattr(item, name, value)
    item.save()


def _document_release(account, item: SourceItem) -> None:
    """The item no longer needs its document: delete it when the item made it, unless another
    item (of any source) shows the same document, which then becomes that item's."""
    if not item.owns_document or not item.document_id:
        return
    other = (
        SourceItem.objects.for_account(account)
        .filter(document_id=item.document_id)
        .exclude(pk=item.pk)
        .order_by("pk")
        .first()
    )
    if other is not None:
        SourceItem.objects.for_account(account).filter(pk=other.pk).update(owns_document=True)
        return
    document = Document.objects.for_account(account).visible().filter(pk=item.document_id).first()
    if document is not None:
        document_delete(account=account, document=document)


def _item_remove(account, item: SourceItem) -> None:
    _document_release(account, item)
    item.delete()


def _remove_unseen(account_id: int, source: Source, sync_id: int, seen: set[str], *, principal: dict) -> int:
    """Items the source no longer has (its pages gone, not linked any more, past max_pages)."""
    removed = 0
    with account_context(account_id=account_id, **principal):
        source = _locked_source(account_id, source, sync_id)
        for item in SourceItem.objects.for_account(account_id).filter(source=source).order_by("pk"):
            if item.key not in seen:
                _item_remove(source.account, item)
                removed += 1
    return removed


def _finish(account_id: int, sync_id: int, counts: Counter, problems: list[str], *, error: str) -> None:
    with account_context(account_id=account_id):
        sync = (
            SourceSync.objects.for_account(account_id)
            .select_for_update(of=("self",))
            .select_related("source")
            .filter(pk=sync_id)
            .first()
        )
        if sync is None or sync.status != SyncStatus.RUNNING:
            return
        now = timezone.now()
        sync.status = SyncStatus.FAILED if error else SyncStatus.SUCCEEDED
        sync.finished_at, sync.error = now, error
        sync.added, sync.updated = counts["added"], counts["updated"]
        sync.removed, sync.unchanged = counts["removed"], counts["unchanged"]
        sync.problems = list(dict.fromkeys(problems))[:MAX_PROBLEMS]
        sync.save()
        source = sync.source
        source.status = SourceStatus.FAILED if error else SourceStatus.IDLE
        source.error = error
        if not error:
            source.last_synced_at = now
        source.next_sync_at = next_sync_after(source, now)
        source.save(update_fields=["status", "error", "last_synced_at", "next_sync_at", "updated_at"])


def source_purge(*, account_id: int, source_id: int) -> None:
    """A deleted source's documents deleted (through documents' delete service, whose job
    cleans their chunks and files), then the source with its items and history. Idempotent."""
    with account_context(account_id=account_id):
        source = (
            Source.objects.for_account(account_id)
            .select_for_update(of=("self",))
            .select_related("account")
            .filter(pk=source_id)
            .first()
        )
        if source is None or source.deleted_at is None:
            return
        for item in SourceItem.objects.for_account(account_id).filter(source=source).order_by("pk"):
            _item_remove(source.account, item)
        source.delete()


def stale_syncs_fail() -> int:
    """Cron: a sync whose worker died (claimed, and no heartbeat for SOURCES_SYNC_STALE_SECONDS)
    is failed, so its source can sync again. A sync still queued (never claimed) is only
    waiting its turn: it is left to the fair queue (sources.jobs.top_up_sync_jobs)."""
    before = timezone.now() - dt.timedelta(seconds=settings.SOURCES_SYNC_STALE_SECONDS)
    with dangerously_bypass_tenancy(reason="sources: find syncs whose worker died"):
        stale = list(
            SourceSync.all_accounts.filter(
                status=SyncStatus.RUNNING, started_at__lt=before, heartbeat_at__lt=before
            ).values_list("account_id", "pk")
        )
    for account_id, sync_id in stale:
        _finish(
            account_id, sync_id, Counter(), [], error="The sync stopped unexpectedly (its worker ended). Sync again."
        )
    return len(stale)
