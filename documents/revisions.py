"""A new version of a document's file, ingested as its next revision (a source's changed
page, sources/sync.py). The document keeps its id, its tags and what links to it; search
answers from its current chunks until the new revision's are published; the revision is
embedded and charged once by the normal ingestion, as a reindex is."""

from __future__ import annotations

import os

from django.conf import settings
from django.db import IntegrityError, transaction

from audit.services import audit_record
from billing.selectors import ingest_credits_require
from documents import jobs
from documents.models import Document, Status
from documents.services import _head, _reopen, _sha256, _target
from documents.storage import document_path, file_delete, file_save
from documents.validation import validate_upload


def document_content_replace(*, account, document: Document, upload) -> Document | None:
    """Validate `upload` as an upload is validated, store it, and make it the document's next
    revision (pending, queued). Returns the document; None when the same bytes are already
    another document of its collection (the caller keeps that one instead). A document being
    deleted is returned unchanged. Nothing is stored when validation fails."""
    validated = validate_upload(
        name=upload.name or "",
        declared_type=getattr(upload, "content_type", None),
        data_head=_head(upload),
        size=upload.size,
        max_bytes=settings.MAX_UPLOAD_BYTES,
        open_file=lambda: _reopen(upload),
    )
    sha256 = _sha256(upload)
    # The revision is paid as the document's ingestion is: by its uploader (ingestion._uploader).
    ingest_credits_require(account=account, user=document.uploaded_by_id, api_key=document.uploaded_by_api_key_id)
    extension = os.path.splitext(validated.safe_name)[1].lower()
    stored = file_save(path=document_path(account_id=document.account_id, extension=extension), content=upload)
    try:
        with transaction.atomic():
            return _revision_start(
                account=account, document=document, validated=validated, sha256=sha256, size=upload.size, stored=stored
            )
    except IntegrityError:
        # The same bytes are another document of the collection (unique collection + sha256).
        file_delete(stored)
        return None


def _revision_start(*, account, document: Document, validated, sha256: str, size: int, stored: str) -> Document:
    document = Document.objects.for_account(account).select_for_update().get(pk=document.pk)
    if document.status == Status.DELETING:
        transaction.on_commit(lambda: file_delete(stored))
        return document
    previous = document.file.name
    document.name, document.kind, document.content_type = validated.safe_name, validated.kind, validated.content_type
    document.size, document.sha256, document.file = size, sha256, stored
    document.revision += 1
    document.status = Status.PENDING
    document.error = document.error_code = ""
    document.attempts = 0
    document.progress_done = document.progress_total = document.chunks_embedded = document.chunks_total = 0
    document.save()
    # NOTE: an ingestion of the previous revision still running reads its file by the name it
    # loaded; the file goes once this commits, and that revision is superseded anyway.
    transaction.on_commit(lambda: file_delete(previous))
    audit_record(
        account=account,
        action="document.reindex",
        target=_target(document),
        detail={"revision": document.revision, "new_content": True},
    )
    jobs.enqueue_ingest(document)
    return document
