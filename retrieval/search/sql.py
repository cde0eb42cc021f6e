"""The statements of hybrid search (query.py runs them): what each one guarantees is in
query.py's docstring; why each is written as it is, beside it.

`%(deleting)s` is every document the search leaves out: those being deleted and those its
tags exclude (PREPARE_SQL computes it). Each path filters by it in its own statement (and
the full-text function inside each tier), so excluded chunks take no candidate's place and
top_k stays k.
"""

from documents.models import (
    RETRIEVABLE_BY_TAGS_SQL,
    VISIBLE_COLLECTION_IDS_SQL,
    VISIBLE_DOCUMENT_SQL,
)

# One statement: the collections searched (those the principal may see, narrowed to the
# caller's list when given), the size of what is searched, the documents left out (being
# deleted, or by their tags: RETRIEVABLE_BY_TAGS_SQL, the account's excluded tags and the
# search's `tags` / `exclude_tags`), and the
# per-transaction pgvector settings (SET LOCAL semantics: set_config(..., true) ends with the
# transaction). Whether the account has a usable index of its own is read from the catalog.
PREPARE_SQL = f"""
SELECT COALESCE(SUM(d.chunk_count) FILTER (WHERE {VISIBLE_DOCUMENT_SQL}), 0)::bigint,
       COALESCE(ARRAY_AGG(d.id) FILTER (WHERE NOT ({VISIBLE_DOCUMENT_SQL}) OR NOT {RETRIEVABLE_BY_TAGS_SQL}),
                '{{}}')::bigint[],
       COALESCE((SELECT i.indisvalid AND i.indisready FROM pg_catalog.pg_index AS i
                 WHERE i.indexrelid = to_regclass(%(tenant_index)s)), false),
       v.ids,
       COALESCE(%(model)s::text,
                (SELECT a.model FROM documents_activeembeddingmodel AS a WHERE a.account_id = %(account_id)s),
                (SELECT c.embedding_model FROM documents_chunk AS c WHERE c.account_id = %(account_id)s LIMIT 1),
                %(default_model)s::text),
       set_config('hnsw.iterative_scan', 'relaxed_order', true),
       set_config('hnsw.ef_search', LEAST(%(ef_max)s, GREATEST(%(ef_search)s,
           COALESCE(SUM(d.chunk_count) FILTER (WHERE {VISIBLE_DOCUMENT_SQL}), 0) / %(ef_step)s))::text, true)
FROM (SELECT ARRAY(SELECT unnest({VISIBLE_COLLECTION_IDS_SQL})
                   INTERSECT SELECT unnest(COALESCE(%(narrow)s::bigint[], {VISIBLE_COLLECTION_IDS_SQL}))
                   ORDER BY 1) AS ids) AS v
LEFT JOIN documents_document AS d ON d.account_id = %(account_id)s AND d.collection_id = ANY (v.ids)
GROUP BY v.ids
"""

# `(distance) + 0` cannot be answered by the HNSW index, so the planner reads the account's
# rows through the account_id btree and sorts them: exact, for small accounts.
# Every vector query compares the query only with vectors of its own model
# (`c.embedding_model = %(model)s`) and dimension: `{dims}` is the query's dimension written in
# as an integer literal, in the expression and predicate of the per-dimension HNSW indexes
# (search.maintenance.vector_expression / vector_dims_predicate), so the planner can use them.
VECTOR_EXACT = """
SELECT c.id, (c.embedding::vector({dims:d})) <=> %(vector)s::vector({dims:d}) AS distance
FROM documents_chunk AS c
WHERE c.account_id = %(account_id)s AND c.collection_id = ANY(%(collections)s::bigint[])
  AND NOT (c.document_id = ANY(%(deleting)s::bigint[]))
  AND c.embedding_model = %(model)s AND vector_dims(c.embedding) = {dims:d}
ORDER BY ((c.embedding::vector({dims:d})) <=> %(vector)s::vector({dims:d})) + 0
LIMIT %(candidates)s
"""

VECTOR_HNSW = """
SELECT c.id, (c.embedding::vector({dims:d})) <=> %(vector)s::vector({dims:d}) AS distance
FROM documents_chunk AS c
WHERE c.account_id = %(account_id)s AND c.collection_id = ANY(%(collections)s::bigint[])
  AND NOT (c.document_id = ANY(%(deleting)s::bigint[]))
  AND c.embedding_model = %(model)s AND vector_dims(c.embedding) = {dims:d}
ORDER BY (c.embedding::vector({dims:d})) <=> %(vector)s::vector({dims:d})
LIMIT %(candidates)s
"""

# The account's own partial HNSW index, predicate `(account_id + 0) = N`. `{account_id:d}`
# is the account id written into the statement as an integer literal (never text), so the
# WHERE clause is the index predicate itself and the planner can prove it, whatever the plan
# cache does (a parameter would not match in a generic plan). `+ 0` keeps the account_id
# btree out: with a plain `account_id = N` the planner still sorts the account's rows from
# the btree, because it takes the RLS policy's filter for selective (~10 %) and so believes
# the account has a tenth of its rows (measured: 73 ms instead of 2 ms for 10,000 chunks).
VECTOR_TENANT_HNSW = """
SELECT c.id, (c.embedding::vector({dims:d})) <=> %(vector)s::vector({dims:d}) AS distance
FROM documents_chunk AS c
WHERE (c.account_id + 0) = {account_id:d} AND vector_dims(c.embedding) = {dims:d}
  AND c.collection_id = ANY(%(collections)s::bigint[])
  AND NOT (c.document_id = ANY(%(deleting)s::bigint[])) AND c.embedding_model = %(model)s
ORDER BY (c.embedding::vector({dims:d})) <=> %(vector)s::vector({dims:d})
LIMIT %(candidates)s
"""

FULLTEXT = (
    "SELECT chunk_id AS id, rank FROM chunk_fulltext_search(%(account_id)s, %(query)s, %(candidates)s,"
    " %(collections)s::bigint[], %(fulltext_pool)s, %(deleting)s::bigint[])"
)
NONE = "SELECT NULL::bigint AS id, NULL::float8 AS {column} WHERE false"

# The candidates' rows are read by primary key (`id = ANY(ARRAY(...))`) behind a
# MATERIALIZED fence, before the join with their documents. Joined directly, the planner
# (which takes the RLS filter for selective) believed a document has about one chunk and
# walked all the chunks of the account's documents to find the ~80 candidates: 100 ms for a
# 10,000-chunk document, against 0.3 ms this way.
SEARCH_SQL = f"""
WITH v AS MATERIALIZED ({{vector}}),
     f AS MATERIALIZED ({{fulltext}}),
     hits AS MATERIALIZED (
        SELECT c.id, c.document_id, c.chunk_index, c.page_start, c.page_end, c.content, c.text_source = 'ocr' AS ocr
        FROM documents_chunk AS c
        WHERE c.id = ANY(ARRAY(SELECT id FROM v UNION SELECT id FROM f)) AND c.account_id = %(account_id)s
          AND c.collection_id = ANY(%(collections)s::bigint[]) AND NOT (c.document_id = ANY(%(deleting)s::bigint[])))
SELECT h.id, h.document_id, d.name, h.chunk_index, h.page_start, h.page_end, v.distance, f.rank, h.content, h.ocr
FROM hits AS h
JOIN documents_document AS d ON d.id = h.document_id AND d.account_id = %(account_id)s
 AND d.collection_id = ANY(%(collections)s::bigint[])
LEFT JOIN v ON v.id = h.id
LEFT JOIN f ON f.id = h.id
WHERE {VISIBLE_DOCUMENT_SQL}
"""
