"""Writes for documents: upload, delete, reindex (one document or a whole account)."""
from __future__ import annotations

import hashlib
import os

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record
from billing.selectors import ingest_credits_require
from documents import jobs
from documents.errors import UploadRejected
from documents.models import Document, ReindexRun, Status
from documents.storage import document_path, file_delete, file_save
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
        raise UploadRejected("too_large", f"This file is larger than the {limit:g} MB limit. "
                                          "Split it into smaller files and upload them separately.", status=413)


def document_upload(*, account, actor, upload) -> tuple[Document, bool]:
    """Validate, store and queue a file. Returns (document, created).

    The same bytes again in the same account return the existing document (created=False).
    Nothing is stored or written when validation fails.
    """
    if upload is None:
        raise UploadRejected("no_file", "Attach a file in the `file` field of a multipart form.", status=400)
    validated = validate_upload(name=upload.name or "", declared_type=getattr(upload, "content_type", None),
                                data_head=_head(upload), size=upload.size, max_bytes=settings.MAX_UPLOAD_BYTES,
                                open_file=lambda: _reopen(upload))
    sha256 = _sha256(upload)
    existing = Document.objects.for_account(account).visible().filter(sha256=sha256).first()
    if existing:
        return existing, False
    ingest_credits_require(account=account)
    extension = os.path.splitext(validated.safe_name)[1].lower()
    stored = file_save(path=document_path(account_id=account.pk, extension=extension), content=upload)
    try:
        with transaction.atomic():
            document = Document.objects.for_account(account).create(
                account=account, name=validated.safe_name, kind=validated.kind, content_type=validated.content_type,
                size=upload.size, sha256=sha256, file=stored, uploaded_by=actor if getattr(actor, "pk", None) else None)
    except IntegrityError:
        # NOTE: the same bytes uploaded twice at once: the unique (account, sha256) constraint
        # lets one win; the other returns the winner and removes its stored copy.
        file_delete(stored)
        return Document.objects.for_account(account).visible().get(sha256=sha256), False
    audit_record(account=account, action="document.upload", actor=actor, target=_target(document), detail={"size": document.size})
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
    document.progress_done = document.progress_total = 0
    document.save()
    audit_record(account=account, action="document.reindex", target=_target(document), detail={"revision": document.revision})
    jobs.enqueue_ingest(document)
    return document


@transaction.atomic
def account_reindex_start(*, account, actor=None) -> ReindexRun:
    """Re-embed every document of the account, one at a time, with progress. At most one
    run is active per account: starting again returns the running one."""
    running = ReindexRun.objects.for_account(account).select_for_update().filter(
        status=ReindexRun.RunStatus.RUNNING).first()
    if running:
        return running
    ingest_credits_require(account=account)
    ids = list(Document.objects.for_account(account).visible()
               .order_by("pk").values_list("pk", flat=True))
    run = ReindexRun.objects.for_account(account).create(
        account=account, embedding_model=settings.EMBEDDING_MODEL, total=len(ids), document_ids=ids,
        created_by=actor if getattr(actor, "pk", None) else None, heartbeat_at=timezone.now())
    audit_record(account=account, action="account.reindex", actor=actor, target=f"reindex run {run.pk}", detail={"documents": len(ids)})
    jobs.enqueue_reindex_run(run)
    return run


@transaction.atomic
def account_reindex_cancel(*, account, run: ReindexRun) -> ReindexRun:
    run = ReindexRun.objects.for_account(account).select_for_update().get(pk=run.pk)
    if run.status == ReindexRun.RunStatus.RUNNING:
        run.status = ReindexRun.RunStatus.CANCELLED
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "finished_at"])
    return run
