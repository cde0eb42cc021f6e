"""Index maintenance for search: each large account gets a partial HNSW index of its own
(`chunk_embedding_hnsw_a<id>`), which query.py uses when it is valid; the cron job
(documents.jobs.refresh_search_indexes) keeps them in step with the accounts' sizes.

Settings (config/settings.py, from the environment):
- SEARCH_TENANT_INDEX_MIN_CHUNKS (5,000): an account past this many chunks gets a partial
  HNSW index of its own; it is dropped again once the account is under half of it.
- SEARCH_TENANT_INDEX_BUILD_MEMORY ("512MB"): memory for building one tenant's index; an
  HNSW build that outgrows it slows down a lot (~1.7 kB a 384-d chunk, so 512MB holds
  ~250k chunks).
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.db.models import Sum

from core.db_owner import owner_connection
from core.tenancy import account_context, dangerously_bypass_tenancy
from documents.models import VISIBLE_DOCUMENT_SQL, Document

TENANT_INDEX_PREFIX = "chunk_embedding_hnsw_a"
DIMENSION_INDEX_PREFIX = "chunk_embedding_hnsw_d"
DEFAULT_DIMENSIONS = 384


def tenant_index_name(account_id: int, dimensions: int = DEFAULT_DIMENSIONS) -> str:
    """The name of the account's own partial HNSW index over its `dimensions`-d vectors
    (the 384-d one keeps the name it had before vectors of other dimensions existed)."""
    suffix = "" if int(dimensions) == DEFAULT_DIMENSIONS else f"_d{int(dimensions)}"
    return f"{TENANT_INDEX_PREFIX}{int(account_id)}{suffix}"


def dimension_index_name(dimensions: int) -> str:
    """The table-wide HNSW index over the `dimensions`-d vectors."""
    return f"{DIMENSION_INDEX_PREFIX}{int(dimensions)}"


def vector_expression(dimensions: int, column: str = "embedding") -> str:
    """The indexed expression for `dimensions`-d vectors: the untyped column cast to a typed
    vector (pgvector's HNSW needs a fixed dimension). Queries repeat it exactly, with
    `vector_dims_predicate`, so the planner can use the index."""
    return f"({column}::vector({int(dimensions):d}))"


def vector_dims_predicate(dimensions: int, column: str = "embedding") -> str:
    return f"vector_dims({column}) = {int(dimensions):d}"


def ensure_dimension_vector_index(dimensions: int, *, concurrently: bool = True) -> str:
    """The table-wide HNSW index for `dimensions`-d vectors, created when missing (before a
    migration to a model of that dimension switches). Returns "created" or "exists"."""
    dimensions = int(dimensions)
    if not 0 < dimensions <= 16000:
        raise ValueError("dimensions out of range")
    name = dimension_index_name(dimensions)
    concurrent = " CONCURRENTLY" if concurrently else ""
    with owner_connection() as conn, conn.cursor() as cursor:
        cursor.execute(_INDEX_STATE_SQL, [name])
        row = cursor.fetchone()
        if row is not None and row[0]:
            return "exists"
        if row is not None:  # left invalid by an interrupted concurrent build
            cursor.execute(f"DROP INDEX{concurrent} IF EXISTS {name}")
        cursor.execute(
            f"CREATE INDEX{concurrent} IF NOT EXISTS {name} ON documents_chunk USING hnsw"
            f" ({vector_expression(dimensions)} vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
            f" WHERE {vector_dims_predicate(dimensions)}"
        )
        return "created"


_INDEX_STATE_SQL = """
SELECT i.indisvalid AND i.indisready FROM pg_catalog.pg_index AS i WHERE i.indexrelid = to_regclass(%s)
"""


def ensure_tenant_vector_index(account_id: int, *, concurrently: bool = True) -> str:
    """Give a large account a partial HNSW index of its own, or take it away from a small one.

    An account of more than `SEARCH_TENANT_INDEX_MIN_CHUNKS` chunks (documents not being
    deleted) gets `chunk_embedding_hnsw_a<id>`, `USING hnsw (embedding vector_cosine_ops)
    WHERE (account_id + 0) = <id>` (m=16, ef_construction=64, as the table-wide index; the
    predicate's form is the one `sql.VECTOR_TENANT_HNSW` repeats); an account
    under half of that (or deleted) loses it. Idempotent and cheap when nothing changes:
    call it after an account's documents are published or deleted, or from a periodic job.

    The index is built on a connection of its own as the schema's owner (core/db_owner.py),
    so it sees committed chunks only and never runs inside the caller's transaction: call
    it outside any atomic block. `concurrently` (the default) builds with CREATE INDEX
    CONCURRENTLY, which does not block ingestion or search. A build left invalid by a crash
    is dropped and rebuilt on the next call. Two callers for one account do not race: a
    session advisory lock per account makes the second return "busy".

    Returns "created", "exists", "dropped", "absent" (small account, no index) or "busy".
    """
    account_id = int(account_id)
    if account_id <= 0:
        raise ValueError("account_id must be a positive integer")
    if connection.in_atomic_block:
        raise RuntimeError("ensure_tenant_vector_index() must run outside a transaction")
    threshold = settings.SEARCH_TENANT_INDEX_MIN_CHUNKS
    with account_context(account_id=account_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(SUM(d.chunk_count), 0) FROM documents_document AS d"
            f" WHERE d.account_id = %s AND {VISIBLE_DOCUMENT_SQL}",
            [account_id],
        )
        chunk_count = int(cursor.fetchone()[0])
        # The index covers the vectors search compares: those of the account's active model.
        cursor.execute("SELECT dimensions FROM documents_activeembeddingmodel WHERE account_id = %s", [account_id])
        row = cursor.fetchone()
    dimensions = int(row[0]) if row else DEFAULT_DIMENSIONS
    name = tenant_index_name(account_id, dimensions)
    concurrent = " CONCURRENTLY" if concurrently else ""
    # DDL is the schema owner's: a connection of its own, outside the app's transaction.
    with owner_connection() as conn, conn.cursor() as cursor:
        # Key space 0x6777 ("gw") for this lock; the account id is the second key.
        cursor.execute("SELECT pg_try_advisory_lock(26487, %s)", [account_id])
        if not cursor.fetchone()[0]:
            return "busy"
        try:
            # Indexes of the account over another dimension (a finished migration's old model).
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'documents_chunk' AND (indexname"
                " IN (%s, %s) OR indexname LIKE %s)",
                [tenant_index_name(account_id), name, tenant_index_name(account_id) + "\\_d%"],
            )
            for (other,) in cursor.fetchall():
                if other != name:
                    cursor.execute(f"DROP INDEX{concurrent} IF EXISTS {other}")
            cursor.execute(_INDEX_STATE_SQL, [name])
            row = cursor.fetchone()
            state = None if row is None else bool(row[0])
            if chunk_count > threshold:
                if state:
                    return "exists"
                if state is False:  # left invalid by an interrupted concurrent build
                    cursor.execute(f"DROP INDEX{concurrent} IF EXISTS {name}")
                cursor.execute(
                    "SELECT set_config('maintenance_work_mem', %s, false)", [settings.SEARCH_TENANT_INDEX_BUILD_MEMORY]
                )
                cursor.execute(
                    f"CREATE INDEX{concurrent} IF NOT EXISTS {name} ON documents_chunk"
                    f" USING hnsw ({vector_expression(dimensions)} vector_cosine_ops)"
                    f" WITH (m = 16, ef_construction = 64)"
                    f" WHERE (account_id + 0) = {account_id:d} AND {vector_dims_predicate(dimensions)}"
                )
                return "created"
            if state is not None and (chunk_count < threshold // 2 or state is False):
                cursor.execute(f"DROP INDEX{concurrent} IF EXISTS {name}")
                return "dropped"
            return "exists" if state else "absent"
        finally:
            cursor.execute("SELECT pg_advisory_unlock(26487, %s)", [account_id])


def tenant_vector_index_drop(account_id: int) -> None:
    """Drop the account's own index, if any (tests and benchmarks start from none)."""
    with owner_connection() as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'documents_chunk'"
            " AND (indexname = %s OR indexname LIKE %s)",
            [tenant_index_name(account_id), tenant_index_name(account_id) + "\\_d%"],
        ).fetchall()
        for (name,) in rows:
            conn.execute(f"DROP INDEX IF EXISTS {name}")


def tenant_vector_indexes_refresh() -> dict[int, str]:
    """Run `ensure_tenant_vector_index()` for every account near or past the threshold and
    every account that has an index; returns {account_id: outcome}.

    Runs outside any transaction, so indexes are built CONCURRENTLY (search and ingestion
    carry on meanwhile).
    """
    threshold = settings.SEARCH_TENANT_INDEX_MIN_CHUNKS
    with dangerously_bypass_tenancy(reason="search maintenance: accounts near the per-account index threshold"):
        large = set(
            Document.all_accounts.visible()
            .values("account_id")
            .annotate(chunks=Sum("chunk_count"))
            .filter(chunks__gt=threshold // 2)
            .values_list("account_id", flat=True)
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'documents_chunk' AND indexname LIKE %s",
                [TENANT_INDEX_PREFIX + "%"],
            )
            indexed = {int(name[len(TENANT_INDEX_PREFIX) :].split("_")[0]) for (name,) in cursor.fetchall()}
    return {account_id: ensure_tenant_vector_index(account_id) for account_id in sorted(large | indexed)}
