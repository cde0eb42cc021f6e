"""Which embedding model embeds an account's new chunks: its ActiveEmbeddingModel row.

Ingestion embeds with it and locks it while publishing; search (retrieval/search/query.py)
compares queries only with vectors of it; the migration to another model
(retrieval/embedding_models.py) switches it. The row is documents' own, so reading and
locking it lives here, below the apps that search and migrate.
"""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from core import rows
from documents.models import ActiveEmbeddingModel


def active_embedding_model(*, account_id: int) -> ActiveEmbeddingModel:
    """The account's active model; made on first use from the vectors its chunks already
    have (an install that changes EMBEDDING_MODEL keeps searching with the model its chunks
    were made with), or from the settings for an account without chunks."""
    account_id = int(getattr(account_id, "pk", account_id))
    # One row per account (unique): read on every chat turn, so without the ORM's compiling.
    found = rows.select_one(ActiveEmbeddingModel, "WHERE t.account_id = %s", [account_id])
    if found is not None:
        return found
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT embedding_model, vector_dims(embedding) FROM documents_chunk WHERE account_id = %s LIMIT 1",
            [account_id],
        )
        row = cursor.fetchone()
    model, dims = row if row else (settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS)
    try:
        with transaction.atomic():
            return ActiveEmbeddingModel.objects.for_account(account_id).create(
                account_id=account_id, model=model, dimensions=dims
            )
    except IntegrityError:  # NOTE: two first uses at once: the unique account key keeps one
        return ActiveEmbeddingModel.objects.for_account(account_id).get()


def active_embedding_model_lock(*, account_id: int) -> ActiveEmbeddingModel:
    """The active model, its row locked FOR SHARE until the transaction ends (publishing
    takes it; the migration's switch takes it FOR UPDATE, so nothing publishes across it)."""
    active_embedding_model(account_id=account_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM documents_activeembeddingmodel WHERE account_id = %s FOR SHARE", [account_id])
    return ActiveEmbeddingModel.objects.for_account(account_id).get()
