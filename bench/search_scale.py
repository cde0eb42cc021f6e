"""Search latency and recall at scale: 100k and 1M 384-d chunks over 1,000 tenants.

Data (synthetic, deterministic): 1,000 accounts, one large (10% of the rows), one medium
(1%), 998 tiny ones sharing the rest. Vectors are noisy copies of 1,000 random unit
cluster centres (so nearest neighbours mean something); each cluster has its own topic
words, and a chunk's text is ~40 words, half from its cluster's topic, so full text
matches too. Loaded with multi-row INSERTs into the real `documents_chunk` table (bench
database) with the HNSW and GIN indexes dropped, then rebuilt. The rows are kept for the
next run (SEARCH_SCALE_KEEP=0 deletes them at the end); 1M is the 100k set grown in place.

After loading, `retrieval.search.ensure_tenant_vector_index()` runs for every bench account
(as the product's publish step does), so accounts past SEARCH_TENANT_INDEX_MIN_CHUNKS get
their own partial HNSW index (its build time is reported).

Measured through the product's own `retrieval.search.hybrid_search` inside an account
context (RLS on, the app role): p50/p95 over 40 queries per tenant, recall@10 of the
vector list against the exact ranking, for each vector path forced (exact; the account's
own index, where it has one; the table-wide HNSW index) and for the path the product picks
by itself ("auto"), full text through `chunk_fulltext_search()` (GIN usable) versus the
same query under RLS directly, and hybrid on the auto path; full text and hybrid also with the
full-text pool unbounded (retrieval.search.query.FULLTEXT_POOL; migration 0012), query by
query, for the latency before the bound and the share of the top 10 it keeps.
SEARCH_SCALE_SIZES=100000,1000000 picks the sizes; SEARCH_SCALE_MEASURE=0 only loads;
SEARCH_SCALE_FORCED_PATHS=0 measures only the paths the product takes.
"""

from __future__ import annotations

import os
import time
from unittest import mock

import numpy as np
from django.db import connection

from bench.common import percentile
from core.db_owner import owner_connection
from retrieval.search import search_path_for, tenant_index_name

DIM = 384
ACCOUNTS = 1000
CLUSTERS = 1000
QUERIES = 40
PREFIX = "bench-scale-"
INSERT_BATCH = 2000
UNBOUNDED_POOL = 2**31 - 1  # chunk_fulltext_search ranks every match (the pool never fills)


def _shares(total: int) -> list[int]:
    large, medium = total // 10, total // 100
    rest = total - large - medium
    tiny = [rest // (ACCOUNTS - 2)] * (ACCOUNTS - 2)
    tiny[0] += rest - sum(tiny)
    return [large, medium, *tiny]


def _model():
    rng = np.random.default_rng(20261130)
    centres = rng.normal(size=(CLUSTERS, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    vocabulary = [
        f"{a}{b}{c}"
        for a in ("ka", "lo", "mi", "ne", "pu", "ru", "sa", "to", "vi", "ze")
        for b in ("bar", "dex", "fin", "gol", "hum", "jav", "kip", "lum", "mor", "nix")
        for c in ("a", "e", "i", "o", "u", "an", "el", "is", "on", "ur")
    ]
    topics = rng.integers(0, len(vocabulary), size=(CLUSTERS, 12))
    return centres, vocabulary, topics


def _accounts() -> list[int]:
    from accounts.models import Account

    existing = list(Account.objects.filter(slug__startswith=PREFIX).order_by("slug").values_list("pk", flat=True))
    if len(existing) < ACCOUNTS:
        Account.objects.bulk_create(
            [Account(name=f"scale {i}", slug=f"{PREFIX}{i:04d}") for i in range(ACCOUNTS)], ignore_conflicts=True
        )
        existing = list(Account.objects.filter(slug__startswith=PREFIX).order_by("slug").values_list("pk", flat=True))
    return existing


def _counts(cursor, account_ids: list[int]) -> dict[int, int]:
    cursor.execute(
        "SELECT account_id, count(*) FROM documents_chunk WHERE account_id = ANY(%s) GROUP BY 1", [account_ids]
    )
    return dict(cursor.fetchall())


def _account_clusters(account_id: int) -> np.ndarray:
    """Each tenant writes about a few topics: its chunks come from 8 of the clusters."""
    return np.random.default_rng(account_id).integers(0, CLUSTERS, size=8)


def _load(total: int, account_ids: list[int]) -> dict:
    """Grow the bench rows to `total` (per the skewed shares); indexes rebuilt if rows were added."""
    from core.tenancy import dangerously_bypass_tenancy
    from documents.services import collection_default_ensure

    centres, vocabulary, topics = _model()
    started = time.perf_counter()
    added = 0
    with dangerously_bypass_tenancy(reason="bench: load synthetic chunks"), connection.cursor() as cursor:
        have = _counts(cursor, account_ids)
        todo = [
            (a, want - have.get(a, 0), have.get(a, 0))
            for a, want in zip(account_ids, _shares(total))
            if want > have.get(a, 0)
        ]
    # Indexes are the schema owner's (core/db_owner.py).
    with owner_connection() as conn, conn.cursor() as cursor:
        if todo:
            cursor.execute("DROP INDEX IF EXISTS chunk_embedding_hnsw_d384")
            cursor.execute("DROP INDEX IF EXISTS chunk_search_gin")
            # Per-account HNSW indexes too (rebuilt by ensure_tenant_vector_index below):
            # an HNSW insert costs ~2 ms a row.
            for account_id in account_ids:
                cursor.execute(f"DROP INDEX IF EXISTS {tenant_index_name(account_id)}")
    for account_id, missing, offset in todo:
        rng = np.random.default_rng(account_id * 7919 + offset)
        clusters = _account_clusters(account_id)
        with dangerously_bypass_tenancy(reason="bench: load synthetic chunks"), connection.cursor() as cursor:
            collection_id = collection_default_ensure(account=account_id).pk
            cursor.execute(
                "INSERT INTO documents_document (account_id, collection_id, name, title, kind, content_type, size, sha256, file,"
                " status, error, error_code, revision, attempts, chunk_count, token_count, embedding_tokens,"
                " credits_charged, embedding_model, embedding_provider, progress_done, progress_total, created_at,"
                " updated_at) VALUES (%s, %s, %s, '', 'txt', 'text/plain', 1, md5(random()::text), '', 'ready', '', '',"
                " 1, 0, %s, 0, 0, 0, 'synthetic', 'bench', 0, 0, now(), now()) RETURNING id",
                [account_id, collection_id, f"synthetic-{offset}.txt", missing],
            )
            document_id = cursor.fetchone()[0]
            for start in range(0, missing, INSERT_BATCH):
                n = min(INSERT_BATCH, missing - start)
                picks = clusters[rng.integers(0, len(clusters), size=n)]
                vectors = centres[picks] + rng.normal(scale=0.06, size=(n, DIM)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                words = rng.integers(0, len(vocabulary), size=(n, 20))
                texts = [
                    " ".join(
                        [vocabulary[w] for w in topics[c][rng.integers(0, 12, size=20)]]
                        + [vocabulary[w] for w in words[i]]
                    )
                    for i, c in enumerate(picks)
                ]
                literals = ["[" + ",".join(f"{x:.5f}" for x in v) + "]" for v in vectors.tolist()]
                cursor.execute(
                    "INSERT INTO documents_chunk (account_id, document_id, collection_id, revision, chunk_index, content,"
                    " token_count, heading_path, embedding, embedding_model, text_source)"
                    " SELECT %s, %s, %s, 1, i, t, 40, '[]'::jsonb, e::vector, 'synthetic', 'text'"
                    " FROM unnest(%s::int[], %s::text[], %s::text[]) AS u(i, t, e)",
                    [
                        account_id,
                        document_id,
                        collection_id,
                        list(range(offset + start, offset + start + n)),
                        texts,
                        literals,
                    ],
                )
                added += n
    load_s = time.perf_counter() - started
    index_s = {}
    if added:
        with owner_connection() as conn, conn.cursor() as cursor:
            cursor.execute("SET maintenance_work_mem = '4GB'")
            cursor.execute("SET max_parallel_maintenance_workers = 2")
            t0 = time.perf_counter()
            # The 384-d expression index of migration 0010 (the column holds vectors of any dimension).
            cursor.execute(
                "CREATE INDEX IF NOT EXISTS chunk_embedding_hnsw_d384 ON documents_chunk USING hnsw "
                "((embedding::vector(384)) vector_cosine_ops) WITH (m = 16, ef_construction = 64) "
                "WHERE vector_dims(embedding) = 384"
            )
            index_s["hnsw"] = round(time.perf_counter() - t0, 1)
            t0 = time.perf_counter()
            cursor.execute("CREATE INDEX IF NOT EXISTS chunk_search_gin ON documents_chunk USING gin (search_vector)")
            index_s["gin"] = round(time.perf_counter() - t0, 1)
            cursor.execute("ANALYZE documents_chunk")
            cursor.execute("ANALYZE documents_document")
    index_s["tenant_indexes"] = _tenant_indexes(account_ids)
    return {"rows_added": added, "insert_seconds": round(load_s, 1), "index_build_seconds": index_s}


def _tenant_indexes(account_ids: list[int]) -> dict:
    """ensure_tenant_vector_index() for every bench account; seconds per index built."""
    from retrieval.search import ensure_tenant_vector_index

    built = {}
    for account_id in account_ids:
        t0 = time.perf_counter()
        if ensure_tenant_vector_index(account_id) == "created":
            built[f"account {account_id}"] = round(time.perf_counter() - t0, 1)
    return built


def _queries(account_id: int, n: int) -> list[tuple[str, np.ndarray]]:
    centres, vocabulary, topics = _model()
    rng = np.random.default_rng(account_id + 1)
    clusters = _account_clusters(account_id)
    out = []
    for _ in range(n):
        c = clusters[rng.integers(0, len(clusters))]
        v = centres[c] + rng.normal(scale=0.06, size=DIM).astype(np.float32)
        out.append((" ".join(vocabulary[w] for w in topics[c][rng.integers(0, 12, size=3)]), v / np.linalg.norm(v)))
    return out


def _forced(path: str):
    """hybrid_search on one vector path ("exact", "tenant_hnsw", "hnsw"), or "auto": the
    product's own choice."""
    from retrieval.search import query as search

    if path == "auto":
        return mock.patch.object(search, "search_path_for", search.search_path_for)
    return mock.patch.object(search, "search_path_for", lambda chunk_count, tenant_index=False: path)


def _measure(account_id: int, *, mode: str, path: str) -> dict:
    """Latency of hybrid_search for one tenant on a vector path, and recall@10 of vector mode
    against the exact ranking. For full text and hybrid, each query also runs with the
    full-text pool unbounded (every match ranked, as before migration 0012), interleaved
    so both see the same machine load: its latency, and how many of the bounded search's
    top 10 are the unbounded one's ("same_top10")."""
    from core.tenancy import account_context
    from retrieval import search
    from retrieval.search import query as search_query

    latencies, recalls, unbounded, same = [], [], [], []
    for query, vector in _queries(account_id, QUERIES):
        with account_context(account_id=account_id):
            with _forced(path):
                t0 = time.perf_counter()
                hits = search.hybrid_search(
                    account=account_id, query=query, query_vector=vector, top_k=10, mode=mode, threshold=-1.0
                )
                latencies.append(time.perf_counter() - t0)
                if mode != "vector":
                    with mock.patch.object(search_query, "FULLTEXT_POOL", UNBOUNDED_POOL):
                        t0 = time.perf_counter()
                        truth = search.hybrid_search(
                            account=account_id, query=query, query_vector=vector, top_k=10, mode=mode, threshold=-1.0
                        )
                        unbounded.append(time.perf_counter() - t0)
                    same.append(len({h.chunk_id for h in hits} & {h.chunk_id for h in truth}) / max(1, len(truth)))
            if mode == "vector":
                with _forced("exact"):
                    truth = search.hybrid_search(
                        account=account_id, query=query, query_vector=vector, top_k=10, mode="vector", threshold=-1.0
                    )
                recalls.append(len({h.chunk_id for h in hits} & {h.chunk_id for h in truth}) / max(1, len(truth)))
    result = {
        "p50_ms": round(1000 * percentile(latencies, 50), 2),
        "p95_ms": round(1000 * percentile(latencies, 95), 2),
    }
    if recalls:
        result["recall@10"] = round(float(np.mean(recalls)), 3)
    if unbounded:
        result |= {
            "unbounded_p50_ms": round(1000 * percentile(unbounded, 50), 2),
            "unbounded_p95_ms": round(1000 * percentile(unbounded, 95), 2),
            "same_top10": round(float(np.mean(same)), 3),
        }
    return result


def _has_tenant_index(account_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [tenant_index_name(account_id)])
        return cursor.fetchone()[0]


def _fulltext_rls_vs_function(account_id: int) -> dict:
    """The same full-text query for one tenant: directly under RLS (GIN unusable: `@@` is not
    leakproof) versus through chunk_fulltext_search() (SECURITY DEFINER, owner bypasses RLS)."""
    from core.tenancy import account_context

    query, _ = _queries(account_id, 1)[0]
    direct = (
        "EXPLAIN (ANALYZE, FORMAT JSON) SELECT c.id, ts_rank_cd(c.search_vector, q) AS r "
        "FROM documents_chunk c, websearch_to_tsquery('english', %s) q "
        "WHERE c.account_id = %s AND c.search_vector @@ q ORDER BY r DESC LIMIT 40"
    )
    out = {}
    with account_context(account_id=account_id), connection.cursor() as cursor:
        cursor.execute(direct, [query.replace(" ", " or "), account_id])
        plan = cursor.fetchone()[0][0]
        out["direct_under_rls_ms"] = round(plan["Execution Time"], 2)
        out["direct_under_rls_plan"] = _plan_nodes(plan["Plan"])
        cursor.execute(
            "SELECT rolname FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner "
            "WHERE proname = 'chunk_fulltext_search'"
        )
        out["function_owner"] = cursor.fetchone()[0]
        timings = []
        for _ in range(10):
            t0 = time.perf_counter()
            cursor.execute("SELECT count(*) FROM chunk_fulltext_search(%s, %s, 40)", [account_id, query])
            cursor.fetchone()
            timings.append(time.perf_counter() - t0)
        out["function_ms_p50"] = round(1000 * percentile(timings, 50), 2)
    with owner_connection() as conn, conn.cursor() as cursor:
        if out["function_owner"] == "groundwork_search":
            # The plan the function gets: as its owner, to whom RLS does not apply (the
            # schema's owner may become it; the app's role may not).
            cursor.execute("SET ROLE groundwork_search")
            cursor.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM (SELECT c.id, ts_rank_cd(c.search_vector, q) r "
                "FROM documents_chunk c, websearch_to_tsquery('english', %s) q WHERE c.account_id = %s "
                "AND c.search_vector @@ q ORDER BY r DESC LIMIT 40) s",
                [query.replace(" ", " or "), account_id],
            )
            plan = cursor.fetchone()[0][0]
            out["as_function_owner_plan"] = _plan_nodes(plan["Plan"])
            out["as_function_owner_ms"] = round(plan["Execution Time"], 2)
    return out


def _plan_nodes(node: dict) -> str:
    name = node["Node Type"] + (f" on {node['Index Name']}" if "Index Name" in node else "")
    children = [_plan_nodes(c) for c in node.get("Plans", [])]
    return name + (f" <- ({'; '.join(children)})" if children else "")


def _uptime() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _cleanup(account_ids: list[int]) -> None:
    from accounts.models import Account
    from core.tenancy import dangerously_bypass_tenancy

    with dangerously_bypass_tenancy(reason="bench: remove synthetic chunks"), connection.cursor() as cursor:
        cursor.execute("DELETE FROM documents_chunk WHERE account_id = ANY(%s)", [account_ids])
        cursor.execute("DELETE FROM documents_document WHERE account_id = ANY(%s)", [account_ids])
        # Inside the bypass: the collector must see the accounts' rows (collections, ...) to
        # delete them first (outside it, RLS hid them and the account's delete failed).
        Account.objects.filter(pk__in=account_ids).delete()


def run() -> dict:
    sizes = [int(s) for s in os.environ.get("SEARCH_SCALE_SIZES", "100000,1000000").split(",")]
    account_ids = _accounts()
    large, medium, tiny = account_ids[0], account_ids[1], account_ids[500]
    results = {}
    for total in sizes:
        load = _load(total, account_ids)
        shares = _shares(total)
        row = {"load": load, "tenants": {"large": shares[0], "medium": shares[1], "tiny": shares[500]}}
        if os.environ.get("SEARCH_SCALE_MEASURE", "1") == "0":
            results[f"{total:,} chunks"] = row
            continue
        row["uptime_before"] = _uptime()
        for label, account_id in (("large", large), ("medium", medium), ("tiny", tiny)):
            paths = ["exact", "tenant_hnsw", "hnsw"] if _has_tenant_index(account_id) else ["exact", "hnsw"]
            if os.environ.get("SEARCH_SCALE_FORCED_PATHS", "1") == "0":
                paths = []  # only the path the product takes (the forced exact path is slow at 1M)
            row[label] = {f"vector_{path}": _measure(account_id, mode="vector", path=path) for path in paths}
            row[label]["auto_path"] = search_path_for(
                shares[account_ids.index(account_id)], tenant_index=_has_tenant_index(account_id)
            )
            row[label] |= {
                "vector_auto": _measure(account_id, mode="vector", path="auto"),
                "fulltext": _measure(account_id, mode="fulltext", path="auto"),
                "hybrid_auto": _measure(account_id, mode="hybrid", path="auto"),
            }
        row["fulltext_rls"] = {"large": _fulltext_rls_vs_function(large), "tiny": _fulltext_rls_vs_function(tiny)}
        row["uptime_after"] = _uptime()
        results[f"{total:,} chunks"] = row
        print(results[f"{total:,} chunks"], flush=True)
    if os.environ.get("SEARCH_SCALE_KEEP", "1") == "0":
        _cleanup(account_ids)
    from django.conf import settings

    from retrieval.search import query as search_query

    results["settings"] = (
        "top_k=10, candidates N=40, hnsw m=16 ef_construction=64, hnsw.ef_search=100, "
        "iterative_scan=relaxed_order, max_scan_tuples default (20000); 40 queries per tenant; "
        f"full-text pool {search_query.FULLTEXT_POOL} (unbounded: {UNBOUNDED_POOL}); "
        f"SEARCH_EXACT_MAX_CHUNKS={settings.SEARCH_EXACT_MAX_CHUNKS}, SEARCH_TENANT_INDEX_MIN_CHUNKS="
        f"{settings.SEARCH_TENANT_INDEX_MIN_CHUNKS}; latency = the whole hybrid_search call (2 queries) "
        "from Python; load average (1/5/15 min) before and after the measurements"
    )
    return results


__all__ = ["run"]
