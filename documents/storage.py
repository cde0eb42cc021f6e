"""Where uploaded files live: Django's default storage (a folder under .data/ by default,
an S3-compatible bucket through django-storages when configured), under an account-scoped
path with a random name. The original file name is display-only."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid

from django.core.files.storage import default_storage


def document_path(*, account_id: int, extension: str) -> str:
    return f"accounts/{account_id}/documents/{uuid.uuid4().hex}{extension}"


def file_save(*, path: str, content) -> str:
    return default_storage.save(path, content)


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
