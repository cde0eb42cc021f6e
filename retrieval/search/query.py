"""Hybrid retrieval inside one account: pgvector + PostgreSQL full text, fused by RRF.

Guarantees of every search function (here and in passages.py):
- it runs inside the caller's `account_context(account)` and refuses to run outside it
  (RLS confines the database to that account), and it also filters by the account in
  every query itself: both locks;
- only chunks in the collections the transaction's principal may see are returned (the
  set `visible_collection_ids()` gives, intersected with the caller's narrowing list), by
  each query itself and again by the row-level-security policy `collection_visibility`;
- chunks of a document carrying a tag the account excludes (RetrievalSettings) are never
  returned, nor, when a search asks, those of documents without one of its `tags` or with
  one of its `exclude_tags` (RETRIEVABLE_BY_TAGS_SQL): left out by each statement itself
  (sql.py), like collections, so top_k stays k;
- chunks of a `deleting` document are never returned (VISIBLE_DOCUMENT_SQL); a
  document's chunks are always one published revision (ingestion swaps them in one
  transaction), so what is found is the current text while a reindex is still running;
- the number of queries is fixed (two for a search, one for an expansion), whatever top_k.

Paths, decided per search from the account's chunk count (see docs/benchmarks.md,
"Search at scale"):
- up to `SEARCH_EXACT_MAX_CHUNKS` chunks: exact, through the account_id btree (recall 1.0,
  a few ms: ~4 µs a row);
- larger, with a valid HNSW index of its own (maintenance.ensure_tenant_vector_index(), a
  partial index `WHERE (account_id + 0) = N`): that index, the query repeating the
  predicate with the account id as a literal so the planner can prove it (a parameter
  would not match it in a generic plan); recall@10 ≥ 0.98 in a few ms for 10,000 chunks,
  ~40 ms for 100,000 (hnsw.ef_search grows with the account, see SEARCH_EF_SEARCH below);
- larger, without one yet: the table-wide HNSW index with pgvector's iterative scan
  (relaxed order, re-sorted here) so a tenant filter still yields its k rows; the planner
  often prefers the btree and an exact sort there, which is correct but slow.
Full text goes through `chunk_fulltext_search()` (migrations 0003, 0007, 0012), which keeps
the GIN index usable under RLS and ranks a bounded pool of at most FULLTEXT_POOL matches
(chunks with all the query's words first, then those with the rarest of them, then any),
so its cost stays flat however many of a large account's chunks share a common word.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np
from django.conf import settings
from django.db import connection

from billing import references
from billing.models import CreditHold, Kind
from billing.services import HoldDraw, credits_debit
from core.tenancy import UnscopedQueryError, current_account_id
from documents.embedding import active_embedding_model
from documents.models import ActiveEmbeddingModel
from documents.tags import tags_filter
from llm import client as llm
from retrieval.search import sql
from retrieval.search.maintenance import DEFAULT_DIMENSIONS, tenant_index_name

RRF_K = 60
# When the full-text list shares no chunk with the vector list in their first AGREEMENT_DEPTH,
# full text found words, not the meaning (a German question's "Python" in English documents; an
# English question about a German document): its ranks then count DISJOINT_TEXT_WEIGHT of a
# vector rank's. Only for a query of DISJOINT_MIN_WORDS words or more: a keyword or two ("zanzibar",
# an error code) is what full text is for, found by it alone or not. Measured on the answer
# evaluation's corpora (`python -m bench fusion_weight`): docs/benchmarks.md.
AGREEMENT_DEPTH = 10
DISJOINT_TEXT_WEIGHT = 0.25
DISJOINT_MIN_WORDS = 3
MIN_CANDIDATES = 40
# Full text ranks at most this many matching chunks (migration 0012): ts_rank_cd costs a few
# µs a chunk, and a common word can match a quarter of a large account (27,000 of 100,000
# chunks in bench/search_scale.py: 100-180 ms). Results are the unbounded ones whenever
# fewer chunks match; past that the pool keeps the chunks with the rarest words, which
# retrieved better than ranking every match (docs/benchmarks.md, "Full text bounded" and
# "Full-text pool": hybrid recall@5 on the Python FAQ 0.908 unbounded, 0.931 with a pool of
# 1,000, 0.943 with 500, 0.931 with 250).
FULLTEXT_POOL = 500
# The settings that tune the paths (config/settings.py, read from the environment):
# - SEARCH_EXACT_MAX_CHUNKS (5,000): exact scan costs ~4 µs a row through the btree (20 ms
#   at 5,000 rows on 2 cores); past this an account is served by its own HNSW index (or
#   the table-wide one until it has one).
# - SEARCH_EF_SEARCH (100), SEARCH_EF_SEARCH_MAX (1,000): hnsw.ef_search grows with the
#   account, chunk_count / EF_SEARCH_CHUNKS_PER_STEP, within these bounds. Measured on 384-d
#   clustered data (docs/benchmarks.md): a 10,000-chunk account has recall@10 0.985 at 100;
#   a 100,000-chunk one 0.73 at 100, 0.92 at 400, 0.99 at 1,000 (pgvector's maximum), at
#   ~40 ms on 2 shared cores.
EF_SEARCH_CHUNKS_PER_STEP = 100
MODES = ("hybrid", "vector", "fulltext")
# PostgreSQL's websearch_to_tsquery turns every '-' before a word into a NOT and stacks
# them: 33 in a row ("-----…", "- - - …") fail with "tsquery stack too small". A search
# text of any content must search, so dashes that negate nothing are spaces, and a query
# keeps at most FULLTEXT_MAX_TERMS words (more only slows the GIN lookup).
FULLTEXT_MAX_TERMS = 100
_DASH_RUNS = re.compile(r"-{2,}")
_DASH_BEFORE_NO_WORD = re.compile(r"-(?!\w)")


@dataclass(frozen=True)
class Hit:
    """One ranked chunk."""

    chunk_id: int
    document_id: int
    document_name: str
    chunk_index: int
    page_start: int | None
    page_end: int | None
    score: float  # fused RRF score
    similarity: float | None  # cosine similarity of the vector match; None if only full text matched
    text: str
    ocr: bool = False  # its text was (partly) read by OCR: its citation says so
    # Where each path put it among its candidates (1-based; None: that path did not find it),
    # and the raw cosine similarity also when under the threshold (`similarity` is None then):
    # what the retrieval test page and `"explain": true` show.
    vector_rank: int | None = None
    fulltext_rank: int | None = None
    vector_similarity: float | None = None
    passed: bool = True  # False: a vector candidate under the threshold that full text did not find


# --- guards -------------------------------------------------------------------------------


def account_id_in_context(account) -> int:
    """The account's id, if and only if the caller's context is that account."""
    account_id = getattr(account, "pk", account)
    if not account_id:
        raise UnscopedQueryError("search needs an account")
    if current_account_id() != int(account_id) or not connection.in_atomic_block:
        raise UnscopedQueryError("search must run inside account_context(account) of the same account")
    return int(account_id)


def fulltext_query_text(text: str) -> str:
    """`text` as websearch_to_tsquery input that cannot fail: a single '-' directly before a
    word stays a negation and a hyphen inside a word stays, quotes and other operators are
    left to websearch_to_tsquery (which ignores what it cannot use); runs of dashes, dashes
    before no word and NUL characters become spaces (measured: 20,000 random dash-heavy
    texts, none fails)."""
    text = _DASH_BEFORE_NO_WORD.sub(" ", _DASH_RUNS.sub(" ", (text or "").replace("\x00", " ")))
    return " ".join(text.split()[:FULLTEXT_MAX_TERMS])


def _vector_literal(vector) -> str:
    values = np.asarray(vector, dtype=np.float32).reshape(-1)
    if values.shape[0] == 0 or not np.all(np.isfinite(values)):
        raise ValueError("the query vector is empty or not finite")
    return "[" + ",".join(f"{v:.7g}" for v in values.tolist()) + "]"


# --- hybrid search ------------------------------------------------------------------------


def search_path_for(chunk_count: int, *, tenant_index: bool = False) -> str:
    """ "exact", "tenant_hnsw" or "hnsw" for an account of `chunk_count` chunks that has (or
    has not) a valid HNSW index of its own."""
    if chunk_count <= settings.SEARCH_EXACT_MAX_CHUNKS:
        return "exact"
    return "tenant_hnsw" if tenant_index else "hnsw"


def _vector_sql(path: str, account_id: int, dims: int) -> str:
    if path == "exact":
        return sql.VECTOR_EXACT.format(dims=int(dims))
    if path == "tenant_hnsw":
        return sql.VECTOR_TENANT_HNSW.format(account_id=int(account_id), dims=int(dims))
    return sql.VECTOR_HNSW.format(dims=int(dims))


def hybrid_search(
    *,
    account,
    query: str,
    query_vector,
    top_k: int | None = None,
    threshold: float | None = None,
    mode: str = "hybrid",
    collection_ids: list[int] | None = None,
    embedding_model: str | None = None,
    explain: bool = False,
    tags: list[str] | None = None,
    exclude_tags: list[str] | None = None,
) -> list[Hit]:
    """The account's best `top_k` chunks for `query` (text) and `query_vector` (its embedding).

    Vector top-N and full-text top-N (N = max(4*top_k, 40)) fused by reciprocal rank
    fusion (k=60), sorted by fused score. A vector match under `threshold` cosine similarity
    counts for nothing, so a chunk found only that way is dropped, while a chunk found by
    full text stays. `mode` "vector" or "fulltext" uses one list only (evaluation).
    Searches the collections the principal may see, or those of `collection_ids` among them
    (selectors.collection_ids_requested checks them first). Two queries, whatever top_k.
    `tags`: only documents carrying any of them; `exclude_tags`: none carrying any of them;
    the account's excluded tags always (documents/tags.py's rules: TagsInvalid, before any
    query, for malformed ones).

    `query_vector` is compared only with chunk vectors of `embedding_model` (the model that
    made it; by default the account's active model) and of its own dimension: never with
    vectors of another model, also while a migration builds the next model's vectors.

    `explain`: the hits are followed by up to `top_k` candidates that did not pass (vector
    matches under `threshold` that full text did not find; `passed` False, score 0), most
    similar first. Every hit carries both paths' ranks either way.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    account_id = account_id_in_context(account)
    vector = _vector_literal(query_vector) if mode != "fulltext" else None
    dims = int(np.asarray(query_vector, dtype=np.float32).reshape(-1).shape[0]) if vector else 0
    top_k = top_k or settings.RAG_TOP_K
    threshold = settings.RAG_MATCH_THRESHOLD if threshold is None else threshold
    candidates = max(4 * top_k, MIN_CANDIDATES)
    params = {
        "account_id": account_id,
        "query": fulltext_query_text(query),
        "candidates": candidates,
        "fulltext_pool": FULLTEXT_POOL,
        "ef_search": settings.SEARCH_EF_SEARCH,
        "ef_max": settings.SEARCH_EF_SEARCH_MAX,
        "ef_step": EF_SEARCH_CHUNKS_PER_STEP,
        "tenant_index": tenant_index_name(account_id, dims or DEFAULT_DIMENSIONS),
        "narrow": None if collection_ids is None else [int(i) for i in collection_ids],
        "tags": tags_filter(tags, field="tags"),
        "exclude_tags": tags_filter(exclude_tags, field="exclude_tags") or [],
        # No model given: the account's active one, read by PREPARE_SQL with the rules of
        # documents.embedding.active_embedding_model (without writing its row).
        "vector": vector,
        "model": embedding_model,
        "default_model": settings.EMBEDDING_MODEL,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql.PREPARE_SQL, params)
        chunk_count, deleting, tenant_index, collections, params["model"], *_ = cursor.fetchone()
        params["deleting"], params["collections"] = list(deleting), list(collections)
        if not collections:
            return []
        vector_sql = sql.NONE.format(column="distance")
        if mode != "fulltext":
            vector_sql = _vector_sql(search_path_for(chunk_count, tenant_index=tenant_index), account_id, dims)
        fulltext_sql = sql.FULLTEXT if mode != "vector" and params["query"].strip() else sql.NONE.format(column="rank")
        cursor.execute(sql.SEARCH_SQL.format(vector=vector_sql, fulltext=fulltext_sql), params)
        rows = cursor.fetchall()
    return _fuse(
        rows,
        top_k=top_k,
        threshold=threshold,
        explain=explain,
        sentence=len(re.findall(r"\w+", query)) >= DISJOINT_MIN_WORDS,
    )


def _fuse(rows, *, top_k: int, threshold: float, explain: bool = False, sentence: bool = True) -> list[Hit]:
    """Reciprocal rank fusion of the two candidate lists carried by `rows` (with `explain`,
    followed by the best `top_k` candidates that scored nothing).

    The vector list is re-sorted by distance here: the iterative index scan returns it in
    relaxed order. `sentence`: the query has DISJOINT_MIN_WORDS words or more (full text then
    counts DISJOINT_TEXT_WEIGHT when the two lists share nothing in their first AGREEMENT_DEPTH).
    """
    by_distance = sorted((r for r in rows if r[6] is not None), key=lambda r: (r[6], r[0]))
    by_rank = sorted((r for r in rows if r[7] is not None), key=lambda r: (-r[7], r[0]))
    vector_rank = {r[0]: i for i, r in enumerate(by_distance, start=1)}
    text_rank = {r[0]: i for i, r in enumerate(by_rank, start=1)}
    agree = bool({r[0] for r in by_distance[:AGREEMENT_DEPTH]} & {r[0] for r in by_rank[:AGREEMENT_DEPTH]})
    text_weight = DISJOINT_TEXT_WEIGHT if sentence and by_distance and not agree else 1.0
    hits, missed = [], []
    for chunk_id, document_id, name, index, page_start, page_end, distance, _rank, content, ocr in rows:
        raw = None if distance is None else 1.0 - float(distance)
        similarity = raw if raw is not None and raw >= threshold else None
        score = 0.0
        if similarity is not None:
            score += 1.0 / (RRF_K + vector_rank[chunk_id])
        if chunk_id in text_rank:
            score += text_weight / (RRF_K + text_rank[chunk_id])
        hit = Hit(
            chunk_id=chunk_id,
            document_id=document_id,
            document_name=name,
            chunk_index=index,
            page_start=page_start,
            page_end=page_end,
            score=score,
            similarity=similarity,
            text=content,
            ocr=bool(ocr),
            vector_rank=vector_rank.get(chunk_id),
            fulltext_rank=text_rank.get(chunk_id),
            vector_similarity=raw,
            passed=score > 0,
        )
        (hits if hit.passed else missed).append(hit)
    hits.sort(key=lambda h: (-h.score, -(h.similarity or 0.0), h.chunk_id))
    if not explain:
        return hits[:top_k]
    missed.sort(key=lambda h: (-(h.vector_similarity or 0.0), h.chunk_id))
    return hits[:top_k] + missed[:top_k]


# --- the one embed -> charge -> search: the search API, the chat turn and MCP call it --------


@dataclass(frozen=True)
class QueryEmbedding:
    """A query's vector and what making it cost."""

    query: str
    vector: np.ndarray
    model: str  # the model that made it: the only chunk vectors it is compared with
    provider: str
    tokens: int  # provider-reported
    draw: HoldDraw | None = None  # charged in a hold's name, written when the hold is settled


@dataclass(frozen=True)
class QuerySearch:
    """The chunks a query found, and the embedding (model, charge) it was searched with."""

    hits: list[Hit]
    embedding: QueryEmbedding
    below_threshold: list[Hit] = dataclasses.field(default_factory=list)  # with `explain` only


def query_embed(
    *,
    account,
    query: str,
    key: str,
    user=None,
    api_key=None,
    hold: CreditHold | None = None,
    draws: list[HoldDraw] | None = None,
    active: ActiveEmbeddingModel | None = None,
) -> QueryEmbedding:
    """Embed `query` with the account's active model (`active`, or read here) and charge its
    provider-reported tokens under idempotency `key`, at least one credit (billing's rule):
    - a debit to the principal (`user` or `api_key`, whose budgets apply) in the caller's
      account context: InsufficientCredits or BudgetExceeded (or a provider error) raises
      with nothing written;
    - with `hold` (a chat turn's, which reserved the query's cost), drawn from the hold and
      never refused;
    - with `hold` and `draws` (the turn's list), the draw is appended to `draws` and written
      when the hold is settled or released (billing.services.HoldDraw). With `active` given
      too this sends no statement, so it runs outside any transaction: nothing is held
      open across the provider call.
    """
    deferred = hold is not None and draws is not None
    if not (deferred and active is not None):
        account_id_in_context(account)
    # The query is embedded with the model the account's chunks are searched by (not
    # EMBEDDING_MODEL, which may name the model a migration is building), and compared with
    # vectors of that model only (hybrid_search's `embedding_model`).
    active = active or active_embedding_model(account_id=getattr(account, "pk", account))
    embedding = llm.with_retries(
        lambda: llm.embed([query], model=active.model, dimensions=active.dimensions, purpose=llm.Purpose.QUERY),
        tries=2,
        first_delay=0.2,
    )
    embedded = QueryEmbedding(
        query=query,
        vector=embedding.vectors[0],
        model=embedding.model,
        provider=embedding.provider,
        tokens=embedding.total_tokens,
    )
    if deferred:
        draw = HoldDraw(
            key=key,
            kind=Kind.EMBEDDING,
            tokens=embedding.total_tokens,
            model=embedding.model,
            provider=embedding.provider,
            reference=references.SEARCH,
        )
        draws.append(draw)
        return dataclasses.replace(embedded, draw=draw)
    credits_debit(
        account=account,
        tokens=embedding.total_tokens,
        key=key,
        kind=Kind.EMBEDDING,
        model=embedding.model,
        provider=embedding.provider,
        reference=references.SEARCH,
        user=user,
        api_key=api_key,
        hold=hold,
    )
    return embedded


def query_search(
    *,
    account,
    query: str,
    key: str,
    top_k: int | None = None,
    user=None,
    api_key=None,
    collection_ids: list[int] | None = None,
    hold: CreditHold | None = None,
    draws: list[HoldDraw] | None = None,
    active: ActiveEmbeddingModel | None = None,
    embedded: QueryEmbedding | None = None,
    explain: bool = False,
    tags: list[str] | None = None,
    exclude_tags: list[str] | None = None,
) -> QuerySearch:
    """Embed `query` and charge it (`query_embed`, which the arguments it shares go to),
    then search: the account's best `top_k` chunks in the collections the principal may see
    (narrowed to `collection_ids`), compared only with vectors of the embedding's model.

    The charge happens before retrieval: a refused charge aborts with nothing retrieved.
    `embedded`: this query's `query_embed`, made and charged before the caller's
    transaction (a chat turn keeps the provider call outside any transaction); then only
    the search runs here. `explain`: `below_threshold` holds the candidates that did not
    pass (hybrid_search's `explain`); the charge is the same. `tags` / `exclude_tags`: as
    hybrid_search's, checked before anything is charged.
    """
    account_id_in_context(account)
    for value, field in ((tags, "tags"), (exclude_tags, "exclude_tags")):
        tags_filter(value, field=field)  # malformed: a 400 before anything is charged
    if embedded is not None and embedded.query != query:
        raise ValueError("`embedded` is another query's embedding")
    embedded = embedded or query_embed(
        account=account, query=query, key=key, user=user, api_key=api_key, hold=hold, draws=draws, active=active
    )
    hits = hybrid_search(
        account=account,
        query=query,
        query_vector=embedded.vector,
        top_k=top_k,
        collection_ids=collection_ids,
        embedding_model=embedded.model,
        explain=explain,
        tags=tags,
        exclude_tags=exclude_tags,
    )
    return QuerySearch(
        hits=[h for h in hits if h.passed], embedding=embedded, below_threshold=[h for h in hits if not h.passed]
    )


def search_for_query(
    *,
    account,
    query: str,
    top_k: int | None = None,
    key: str,
    user=None,
    api_key=None,
    collection_ids: list[int] | None = None,
    hold: CreditHold | None = None,
    tags: list[str] | None = None,
    exclude_tags: list[str] | None = None,
) -> list[Hit]:
    """`query_search`'s hits (the search API's): embed `query`, charge its provider-reported
    tokens (idempotency `key`) to the principal (`user` or `api_key`, whose budgets apply) or
    draw them from `hold`, then search (only documents with any of `tags`, none with any of
    `exclude_tags` or of the account's excluded tags)."""
    return query_search(
        account=account,
        query=query,
        top_k=top_k,
        key=key,
        user=user,
        api_key=api_key,
        collection_ids=collection_ids,
        hold=hold,
        tags=tags,
        exclude_tags=exclude_tags,
    ).hits
