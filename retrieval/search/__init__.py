"""Search over an account's chunks, in three parts:

- query.py: hybrid search (vector + full text, reciprocal rank fusion, threshold, top_k)
  and `query_search`, the one embed -> charge -> search that the search API (through
  `search_for_query`, its hits), the chat turn and MCP call;
- passages.py: neighbour expansion, a document's first chunks, passages grouped by document;
- maintenance.py: per-account HNSW indexes and the refresh the cron job runs.

The names callers use are re-exported here.
"""

from retrieval.search.maintenance import (
    ensure_tenant_vector_index,
    tenant_index_name,
    tenant_vector_index_drop,
    tenant_vector_indexes_refresh,
)
from retrieval.search.passages import (
    Passage,
    expand_passages,
    first_chunks,
    hit_passages,
    merge_overlap,
    ocr_chunk_ids,
)
from retrieval.search.query import (
    Hit,
    QueryEmbedding,
    QuerySearch,
    hybrid_search,
    query_embed,
    query_search,
    search_for_query,
    search_path_for,
)

__all__ = [
    "Hit",
    "Passage",
    "QueryEmbedding",
    "QuerySearch",
    "hybrid_search",
    "query_embed",
    "query_search",
    "search_for_query",
    "expand_passages",
    "first_chunks",
    "hit_passages",
    "merge_overlap",
    "ocr_chunk_ids",
    "search_path_for",
    "tenant_index_name",
    "ensure_tenant_vector_index",
    "tenant_vector_index_drop",
    "tenant_vector_indexes_refresh",
]
