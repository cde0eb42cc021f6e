"""Where uploaded files live: Django's default storage (a folder under .data/ by default,
an S3-compatible bucket through django-storages when configured), under an account-scoped
path with a random name. The original file name is display-only."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import tempfile
import uuid

from django.core.files.storage import default_storage

from documents.error_codes import DocumentErrorCode
from documents.errors import UploadRejected

logger = logging.getLogger("groundwork.documents")

# A full disk (or a user's quota) where uploaded files are kept.
_FULL = (errno.ENOSPC, errno.EDQUOT)
STORAGE_FULL_MESSAGE = (
    "Groundwork's file storage is full, so this file was not saved and nothing was added. "
    "Try again later; if it keeps happening, tell your administrator (the server's disk "
    "for uploaded files needs space)."
)


def document_path(*, account_id: int, extension: str) -> str:
    return f"accounts/{account_id}/documents/{uuid.uuid4().hex}{extension}"


def file_save(*, path: str, content) -> str:
    """Store `content` at `path` (its name may differ) and return the stored name. A full disk
    raises UploadRejected 507 `storage_full` and leaves no partial file behind; the caller
    writes no row for it (documents/services.py stores the file first)."""
    try:
        return default_storage.save(path, content)
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        logger.error("uploaded file not stored: the storage is full (%s)", exc)
        with contextlib.suppress(OSError):
            if default_storage.exists(path):
                default_storage.delete(path)  # what was written of it before the disk filled
        raise UploadRejected(DocumentErrorCode.STORAGE_FULL, STORAGE_FULL_MESSAGE, status=507) from None


def file_delete(name: str) -> None:
    if name and default_storage.exists(name):
        default_storage.delete(name)


def file_open(name: str):
    """The stored file, opened for reading in binary (the caller closes it, e.g. a FileResponse)."""
    return default_storage.open(name, "rb")


@contextlib.contextmanager
def local_copy(name: str):
    """A local filesystem path for the stored file (a temporary copy for remote storage),
    so the sandboxed parser can open it."""
    try:
        yield default_storage.path(name)
        return
    except NotImplementedError:
        pass
    suffix = os.path.splitext(name)[1]
    with tempfile.NamedTemporaryFile(suffix=suffix) as tmp, default_storage.open(name, "rb") as source:
        shutil.copyfileobj(source, tmp)
        tmp.flush()
        yield tmp.name
