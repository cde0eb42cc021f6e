"""Purging a deleted account's documents (the job documents.jobs.purge_account).

Runs as the account's own unit of work and removes each document with its chunks, staged
embeddings and stored file (one document per transaction, so a purge that stops half way
resumes where it stopped), any file left under the account's folder, the reindex runs, the
collections and grants (the account's own vector index is dropped by retrieval's job on
account_deleted: retrieval/jobs.py). Run twice, the second run finds
nothing to do.
"""

from __future__ import annotations

import logging

from django.core.files.storage import default_storage

from accounts.models import Account
from core.tenancy import account_context
from documents import ingestion
from documents.models import (
    ActiveEmbeddingModel,
    Collection,
    CollectionAccess,
    Document,
    IngestionLane,
    ReindexRun,
    Status,
)
from documents.storage import file_delete

logger = logging.getLogger("groundwork.documents")

PURGE_BATCH = 100


def _account_is_deleted(account_id: int) -> bool:
    return Account.objects.filter(pk=account_id, deleted_at__isnull=False).exists()


def account_purge(*, account_id: int) -> int:
    """Remove a deleted account's documents, files, chunks, staging, reindex runs and
    collections. Returns how many documents this run removed. Refuses (returns 0) for an
    account that is not deleted: a stray job never empties a live account."""
    if not _account_is_deleted(account_id):
        logger.warning("account purge for account %s, which is not deleted: nothing done", account_id)
        return 0
    with account_context(account_id=account_id):
        # NOTE: an upload that committed just after the deletion (its request resolved the
        # account a moment before) is caught here: everything is `deleting` before the loop.
        Document.objects.for_account(account_id).exclude(status=Status.DELETING).update(status=Status.DELETING)
    removed = 0
    while True:
        with account_context(account_id=account_id):
            ids = list(
                Document.objects.for_account(account_id).order_by("pk").values_list("pk", flat=True)[:PURGE_BATCH]
            )
        if not ids:
            break
        for document_id in ids:
            ingestion.purge(account_id=account_id, document_id=document_id)  # its own transaction
            removed += 1
    _files_left_remove(account_id)
    with account_context(account_id=account_id):
        ReindexRun.objects.for_account(account_id).delete()
        IngestionLane.objects.for_account(account_id).delete()
        ActiveEmbeddingModel.objects.for_account(account_id).delete()
        CollectionAccess.objects.for_account(account_id).delete()
        Collection.objects.for_account(account_id).delete()
    logger.info("purged account %s: %d documents", account_id, removed)
    return removed


def _files_left_remove(account_id: int) -> None:
    """Files under the account's folder that no document names any more (an upload whose
    row never committed): storage keeps nothing of a deleted account."""
    folder = f"accounts/{account_id}/documents"
    try:
        _, files = default_storage.listdir(folder)
    except (FileNotFoundError, NotImplementedError):
        return
    for name in files:
        file_delete(f"{folder}/{name}")
