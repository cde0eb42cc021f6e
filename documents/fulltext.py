"""Documents ingested before languages were detected (migration 0015) get theirs: the
cron job `documents.jobs.backfill_document_languages` detects each one's language from its
chunks and re-indexes its full text with the matching configuration. Until then they keep
searching exactly as before (indexed "english", and searched under "english" too).

Such a document is told by `language = ""` with `search_config = 'english'`: a document
ingested since then whose language could not be told has `simple`.
"""

from __future__ import annotations

from django.db import connection, transaction

from core.tenancy import account_context, dangerously_bypass_tenancy
from documents.language import SAMPLE_CHARS, language_detect, search_config_for
from documents.models import Chunk, Document, Status

BACKFILL_BATCH = 200


def _pending():
    return Document.all_accounts.filter(status=Status.READY, language="", search_config="english")


def document_languages_backfill(*, limit: int = BACKFILL_BATCH) -> int:
    """Detect and apply the language of up to `limit` documents ingested before 0015;
    returns how many were done. Idempotent; a document reindexed meanwhile is skipped (its
    publish detected it)."""
    with dangerously_bypass_tenancy(reason="full-text language backfill: documents ingested before 0015"):
        todo = list(_pending().order_by("pk").values_list("account_id", "pk")[:limit])
    for account_id, document_id in todo:
        document_language_apply(account_id=account_id, document_id=document_id)
    return len(todo)


def _sample(account_id: int, document_id: int) -> str:
    parts, size = [], 0
    for content in (
        Chunk.objects.for_account(account_id)
        .filter(document_id=document_id)
        .order_by("chunk_index")
        .values_list("content", flat=True)
        .iterator()
    ):
        parts.append(content)
        size += len(content)
        if size >= SAMPLE_CHARS:
            break
    return "\n".join(parts)


def document_language_apply(*, account_id: int, document_id: int) -> None:
    """One document's language and its chunks' configuration, in one transaction."""
    with account_context(account_id=account_id), transaction.atomic():
        # NOTE: locked as _publish locks it, so a reindex cannot swap the chunks meanwhile.
        document = (
            Document.objects.for_account(account_id)
            .select_for_update()
            .filter(pk=document_id, status=Status.READY, language="", search_config="english")
            .first()
        )
        if document is None:
            return
        language = language_detect(_sample(account_id, document_id))
        config = search_config_for(language)
        if config != "english":  # "english" chunks are indexed right already: no rewrite
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE documents_chunk SET search_config = %s::regconfig"
                    " WHERE account_id = %s AND document_id = %s",
                    [config, account_id, document_id],
                )
        document.language, document.search_config = language, config
        document.save(update_fields=["language", "search_config"])
