"""Writes for documents: upload, delete, reindex (one document or a whole account)."""

from __future__ import annotations

import hashlib
import os

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import ApiKey, Membership
from accounts.permissions import Action, Forbidden, actor_require
from audit.services import audit_record
from billing.selectors import ingest_credits_require
from core.error_codes import CoreErrorCode
from core.tenancy import current_context
from core.text import CONTROL_CHARACTERS_MESSAGE, has_control_characters
from documents import jobs
from documents.error_codes import DocumentErrorCode
from documents.errors import CollectionError, UploadRejected
from documents.models import (
    DEFAULT_COLLECTION_NAME,
    Chunk,
    Collection,
    CollectionAccess,
    Document,
    EmbeddingBatch,
    ReindexRun,
    Status,
)
from documents.run_kinds import run_kind_for
from documents.storage import document_path, file_delete, file_save
from documents.tags import tags_clean
from documents.validation import validate_upload

HEAD_BYTES = 8192


def _sha256(upload) -> str:
    digest = hashlib.sha256()
    for block in upload.chunks():
        digest.update(block)
    upload.seek(0)
    return digest.hexdigest()


def _head(upload) -> bytes:
    upload.seek(0)
    head = upload.read(HEAD_BYTES)
    upload.seek(0)
    return head


MULTIPART_OVERHEAD = 64 * 1024


def upload_request_check(*, content_length) -> None:
    """Refuse an oversized upload from its Content-Length, before the body is read."""
    try:
        length = int(content_length or 0)
    except (TypeError, ValueError):
        return
    if length > settings.MAX_UPLOAD_BYTES + MULTIPART_OVERHEAD:
        limit = settings.MAX_UPLOAD_BYTES / (1024 * 1024)
        raise UploadRejected(
            CoreErrorCode.TOO_LARGE,
            f"This file is larger than the {limit:g} MB limit. Split it into smaller files and upload them separately.",
            status=413,
        )


def document_upload(
    *, account, actor, upload, collection: Collection | None = None, tags: list[str] | None = None
) -> tuple[Document, bool]:
    """Validate, store and queue a file into `collection` (a collection the principal may
    see, from `collection_access_by_id`; the account's default when None), carrying `tags`
    (documents/tags.py's rules; TagsInvalid before anything is stored). Returns
    (document, created).

    The same bytes again in the same account return the existing document (created=False)
    when the principal may see it; a copy in a collection it may not see is not revealed:
    the file is stored again in `collection`. Nothing is stored or written when validation
    fails.
    """
    tags = tags_clean(tags)
    if upload is None:
        raise UploadRejected(
            DocumentErrorCode.NO_FILE, "Attach a file in the `file` field of a multipart form.", status=400
        )
    validated = validate_upload(
        name=upload.name or "",
        declared_type=getattr(upload, "content_type", None),
        data_head=_head(upload),
        size=upload.size,
        max_bytes=settings.MAX_UPLOAD_BYTES,
        open_file=lambda: _reopen(upload),
    )
    sha256 = _sha256(upload)
    existing = Document.objects.for_account(account).readable().filter(sha256=sha256).order_by("pk").first()
    if existing:
        return existing, False
    collection = collection or collection_default_ensure(account=account)
    # The uploader's budgets must have MIN_CREDITS_TO_INGEST left too (402 budget_exceeded);
    # a key's upload is the key's (the unit of work's principal), a member's the member's.
    api_key_id = current_context().api_key_id
    ingest_credits_require(account=account, user=actor, api_key=api_key_id)
    extension = os.path.splitext(validated.safe_name)[1].lower()
    stored = file_save(path=document_path(account_id=account.pk, extension=extension), content=upload)
    try:
        with transaction.atomic():
            document = Document.objects.for_account(account).create(
                account=account,
                collection=collection,
                name=validated.safe_name,
                kind=validated.kind,
                content_type=validated.content_type,
                size=upload.size,
                sha256=sha256,
                file=stored,
                uploaded_by=actor if getattr(actor, "pk", None) else None,
                uploaded_by_api_key_id=api_key_id,
                tags=tags,
            )
    except IntegrityError:
        # NOTE: the same bytes uploaded twice at once: the unique (collection, sha256)
        # constraint lets one win; the other returns the winner and removes its stored copy.
        file_delete(stored)
        return Document.objects.for_account(account).readable().get(collection=collection, sha256=sha256), False
    audit_record(
        account=account,
        action="document.upload",
        actor=actor,
        target=_target(document),
        detail={"size": document.size, **({"tags": tags} if tags else {})},
    )
    jobs.enqueue_ingest(document)
    return document, True


def _target(document: Document) -> str:
    return f"{document.name} (document {document.pk})"


def _reopen(upload):
    upload.seek(0)
    return upload


@transaction.atomic
def document_delete(*, account, document: Document) -> Document:
    """Gone from lists and search at once; a job removes chunks, staging and the file."""
    document = Document.objects.for_account(account).select_for_update().get(pk=document.pk)
    if document.status != Status.DELETING:
        document.status = Status.DELETING
        document.save(update_fields=["status", "updated_at"])
        audit_record(account=account, action="document.delete", target=_target(document))
    jobs.enqueue_delete(document)
    return document


@transaction.atomic
def document_reindex(*, account, document: Document) -> Document:
    """Re-embed into a new revision; search answers from the current chunks until the new
    ones are published."""
    document = Document.objects.for_account(account).select_for_update().get(pk=document.pk)
    if document.status == Status.DELETING:
        return document
    ingest_credits_require(account=account)
    document.revision += 1
    document.status = Status.PENDING
    document.error = document.error_code = ""
    document.attempts = 0
    document.progress_done = document.progress_total = document.chunks_embedded = document.chunks_total = 0
    document.save()
    audit_record(
        account=account, action="document.reindex", target=_target(document), detail={"revision": document.revision}
    )
    jobs.enqueue_ingest(document)
    return document


@transaction.atomic
def account_reindex_start(*, account, actor=None) -> ReindexRun:
    """Re-embed every document of the account, one at a time, with progress. At most one
    run is active per account: starting again returns the running one."""
    running = (
        ReindexRun.objects.for_account(account).select_for_update().filter(status=ReindexRun.RunStatus.RUNNING).first()
    )
    if running:
        return running
    ingest_credits_require(account=account)
    ids = list(Document.objects.for_account(account).visible().order_by("pk").values_list("pk", flat=True))
    run = ReindexRun.objects.for_account(account).create(
        account=account,
        embedding_model=settings.EMBEDDING_MODEL,
        total=len(ids),
        document_ids=ids,
        created_by=actor if getattr(actor, "pk", None) else None,
        heartbeat_at=timezone.now(),
    )
    audit_record(
        account=account,
        action="account.reindex",
        actor=actor,
        target=f"reindex run {run.pk}",
        detail={"documents": len(ids)},
    )
    jobs.enqueue_reindex_run(run)
    return run


@transaction.atomic
def account_reindex_cancel(*, account, run: ReindexRun) -> ReindexRun:
    """Stop a run now, also mid-document: the document it is reindexing goes back to the
    chunks it had (its remaining batches are not embedded, nothing is charged for it). A
    cancelled embedding-model migration drops the vectors it built; the old model serves on."""
    run = ReindexRun.objects.for_account(account).select_for_update().get(pk=run.pk)
    if run.status == ReindexRun.RunStatus.RUNNING:
        run.status = ReindexRun.RunStatus.CANCELLED
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "finished_at"])
        owner = run_kind_for(run.kind)
        if owner is not None:  # an embedding-model migration: retrieval's (documents/run_kinds.py)
            owner.cancel(account_id=run.account_id, run=run)
        elif run.current_document_id and run.current_revision:
            document = (
                Document.objects.for_account(account)
                .filter(pk=run.current_document_id, revision=run.current_revision)
                .first()
            )
            if document is not None:
                _reindex_cancel(account=account, document=document)
        audit_record(
            account=account,
            action="account.reindex",
            target=f"reindex run {run.pk}",
            detail={"cancelled": True, "kind": run.kind},
        )
    return run


@transaction.atomic
def document_reindex_cancel(*, account, document: Document) -> Document:
    """Cancel a document's pending or running reindex: it keeps the chunks it had (and is
    ready again); its staged batches are dropped and nothing is charged. A document that has
    no chunks yet (its first ingestion) fails with "cancelled". Nothing to cancel: unchanged."""
    document = _reindex_cancel(account=account, document=document)
    return document


def _reindex_cancel(*, account, document: Document) -> Document:
    # NOTE: the row lock is the one ingestion._stage and _publish take: a batch staged
    # before this sees it deleted here; one staged after sees the document is not processing.
    document = Document.objects.for_account(account).select_for_update().get(pk=document.pk)
    if document.status not in (Status.PENDING, Status.PROCESSING):
        return document
    EmbeddingBatch.objects.for_account(account).filter(document=document).delete()
    if Chunk.objects.for_account(account).filter(document=document).exists():
        document.status = Status.READY
        document.progress_done, document.chunks_embedded = document.progress_total, document.chunks_total
    else:
        document.status, document.error_code = Status.FAILED, "cancelled"
        document.error = "Processing was cancelled. Reindex the document to try again."
    document.save()
    audit_record(
        account=account,
        action="document.reindex",
        target=_target(document),
        detail={"cancelled": True, "revision": document.revision},
    )
    return document


# --- collections ------------------------------------------------------------------------------


def collection_default_ensure(*, account) -> Collection:
    """The account's default collection ("General"), created when missing. Accounts get it
    when they are created (documents.apps answers accounts.signals.account_created); this
    also covers an account made before collections existed. Idempotent under races (one
    default per account is a unique constraint)."""
    account_id = getattr(account, "pk", account)
    found = Collection.objects.for_account(account_id).filter(is_default=True).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return Collection.objects.for_account(account_id).create(
                account_id=account_id, name=DEFAULT_COLLECTION_NAME, is_default=True
            )
    except IntegrityError:
        return Collection.objects.for_account(account_id).get(is_default=True)


def collections_for_new_account(sender, *, account, **kwargs) -> None:
    """Receiver of accounts.signals.account_created (inside the account's context)."""
    collection_default_ensure(account=account)


def _require_manager(*, account, actor) -> None:
    """Collections are people's decisions, as keys and members are: owners and admins only
    (an API key, or a member or viewer, is refused with 403)."""
    try:
        actor_require(account=account, actor=actor, action=Action.COLLECTIONS_MANAGE)
    except Forbidden:
        raise CollectionError(
            CoreErrorCode.FORBIDDEN, "Only owners and admins can manage collections.", status=403
        ) from None


def _clean_name(account, name, *, exclude_pk=None) -> str:
    if has_control_characters(name):
        raise CollectionError(CoreErrorCode.INVALID_NAME, CONTROL_CHARACTERS_MESSAGE, field="name")
    name = " ".join((name or "").split())[:100]
    if not name:
        raise CollectionError(CoreErrorCode.INVALID_NAME, "Give the collection a name.", field="name")
    taken = Collection.objects.for_account(account).filter(name__iexact=name)
    if exclude_pk is not None:
        taken = taken.exclude(pk=exclude_pk)
    if taken.exists():
        raise CollectionError(
            DocumentErrorCode.DUPLICATE_NAME, f"There is already a collection named “{name}”.", field="name"
        )
    return name


def _collection_target(collection: Collection) -> str:
    return f"{collection.name} (collection {collection.pk})"


@transaction.atomic
def collection_create(
    *, account, actor, name: str, restricted: bool = False, user_ids=(), api_key_ids=()
) -> Collection:
    """A new collection (owners and admins). A restricted one is seen by owners, admins and
    the members and keys given access (`user_ids`, `api_key_ids`)."""
    _require_manager(account=account, actor=actor)
    collection = Collection.objects.for_account(account).create(
        account=account, name=_clean_name(account, name), restricted=bool(restricted), created_by=actor
    )
    audit_record(
        account=account,
        action="collection.create",
        actor=actor,
        target=_collection_target(collection),
        detail={"restricted": collection.restricted},
    )
    if user_ids or api_key_ids:
        _access_set(account=account, actor=actor, collection=collection, user_ids=user_ids, api_key_ids=api_key_ids)
    return collection


@transaction.atomic
def collection_update(
    *,
    account,
    actor,
    collection: Collection,
    name: str | None = None,
    restricted: bool | None = None,
    user_ids=None,
    api_key_ids=None,
) -> Collection:
    """Rename, restrict or open, and set who has access (the whole list of members and of
    keys, each when given). Owners and admins only; every change of restriction or access is
    in the audit log. The default collection cannot be restricted."""
    _require_manager(account=account, actor=actor)
    collection = Collection.objects.for_account(account).select_for_update().get(pk=collection.pk)
    if name is not None and name != collection.name:
        old = collection.name
        collection.name = _clean_name(account, name, exclude_pk=collection.pk)
        collection.save(update_fields=["name"])
        audit_record(
            account=account,
            action="collection.rename",
            actor=actor,
            target=_collection_target(collection),
            detail={"from": old},
        )
    if restricted is not None and bool(restricted) != collection.restricted:
        if collection.is_default and restricted:
            raise CollectionError(
                DocumentErrorCode.DEFAULT_COLLECTION,
                "The default collection is open to everyone in the account; restrict another collection.",
                field="restricted",
            )
        collection.restricted = bool(restricted)
        collection.save(update_fields=["restricted"])
        audit_record(
            account=account,
            action="collection.restrict",
            actor=actor,
            target=_collection_target(collection),
            detail={"restricted": collection.restricted},
        )
    if user_ids is not None or api_key_ids is not None:
        _access_set(account=account, actor=actor, collection=collection, user_ids=user_ids, api_key_ids=api_key_ids)
    return collection


def _access_set(*, account, actor, collection: Collection, user_ids=None, api_key_ids=None) -> None:
    """Make the access list exactly `user_ids` (members of the account) and `api_key_ids`
    (its keys, not revoked), each when given. An id that is not one of those is a 400."""
    rows = CollectionAccess.objects.for_account(account).filter(collection=collection)
    changes = {}
    for field, wanted, valid in (
        (
            "user",
            user_ids,
            lambda ids: (
                Membership.objects.for_account(account).filter(user_id__in=ids).values_list("user_id", flat=True)
            ),
        ),
        (
            "api_key",
            api_key_ids,
            lambda ids: (
                ApiKey.objects.for_account(account)
                .filter(pk__in=ids, revoked_at__isnull=True)
                .values_list("pk", flat=True)
            ),
        ),
    ):
        if wanted is None:
            continue
        try:
            wanted = {int(i) for i in wanted}
        except (TypeError, ValueError):
            raise CollectionError(
                DocumentErrorCode.INVALID_ACCESS, f"`{field}s` must be a list of ids.", field=f"{field}s"
            ) from None
        if set(valid(wanted)) != wanted:
            what = "members of this account" if field == "user" else "active API keys of this account"
            raise CollectionError(
                DocumentErrorCode.INVALID_ACCESS, f"Access can only be given to {what}.", field=f"{field}s"
            )
        current = set(rows.filter(**{f"{field}__isnull": False}).values_list(f"{field}_id", flat=True))
        added, removed = sorted(wanted - current), sorted(current - wanted)
        rows.filter(**{f"{field}_id__in": removed}).delete()
        CollectionAccess.objects.for_account(account).bulk_create(
            [
                CollectionAccess(account_id=collection.account_id, collection=collection, **{f"{field}_id": i})
                for i in added
            ]
        )
        if added or removed:
            changes[f"{field}s_added"], changes[f"{field}s_removed"] = added, removed
    if changes:
        audit_record(
            account=account,
            action="collection.access",
            actor=actor,
            target=_collection_target(collection),
            detail=changes,
        )


@transaction.atomic
def collection_delete(*, account, actor, collection: Collection, move_documents: bool = False) -> None:
    """Delete an empty collection; with `move_documents`, its documents first move to the
    default collection. The default collection itself cannot be deleted."""
    _require_manager(account=account, actor=actor)
    collection = Collection.objects.for_account(account).select_for_update().get(pk=collection.pk)
    if collection.is_default:
        raise CollectionError(DocumentErrorCode.DEFAULT_COLLECTION, "The default collection cannot be deleted.")
    # Every document counts here, also those being deleted (their rows still point at it).
    documents = Document.all_accounts.filter(account_id=collection.account_id, collection=collection)
    if documents.exclude(status=Status.DELETING).exists() and not move_documents:
        raise CollectionError(
            DocumentErrorCode.COLLECTION_NOT_EMPTY,
            f"This collection still has documents: move them to {DEFAULT_COLLECTION_NAME} first, or delete them.",
            status=409,
        )
    moved = _documents_move(documents, collection_default_ensure(account=account))
    target = _collection_target(collection)
    collection.delete()
    audit_record(
        account=account, action="collection.delete", actor=actor, target=target, detail={"documents_moved": moved}
    )


def _documents_move(documents, target: Collection) -> int:
    """Move documents and their chunks (the denormalised collection_id) in one transaction."""
    ids = list(documents.values_list("pk", flat=True))
    if not ids:
        return 0
    Document.all_accounts.filter(pk__in=ids).update(collection=target)
    Chunk.all_accounts.filter(account_id=target.account_id, document_id__in=ids).update(collection=target)
    return len(ids)


@transaction.atomic
def document_move(*, account, actor, document: Document, collection: Collection) -> Document:
    """Move a document (and its chunks) to another collection the principal may see. Owners
    and admins only (collections.manage in accounts/permissions.py's table)."""
    _require_manager(account=account, actor=actor)
    document = Document.objects.for_account(account).select_for_update().get(pk=document.pk)
    if document.collection_id != collection.pk:
        source = document.collection_id
        _documents_move(Document.objects.for_account(account).filter(pk=document.pk), collection)
        document.refresh_from_db()
        audit_record(
            account=account,
            action="document.move",
            actor=actor,
            target=_target(document),
            detail={"from_collection": source, "to_collection": collection.pk},
        )
    return document
