"""First visible text of a chat answer on the bundled model while a large upload is embedded on
the same local model server, against the same questions asked on an idle server
(`python -m bench chat_while_indexing`).

One `llm.local_server` (Qwen2.5-Coder-0.5B, multilingual-e5-small on onnxruntime, 2 threads)
per setting, so each starts cold alike. Idle: BENCH_CHAT_RUNS questions, one after another.
Indexing: the same number of other questions while two threads (a worker's
EMBEDDING_CONCURRENCY=2) send embedding requests of 96 real chunks without pause, as
ingestion does. Two settings are paired in one run: the server's chat-first priority on (the
default, llm/local_server.py ChatFirst) and off (LOCAL_CHAT_FIRST_WAIT_SECONDS=0, the server
before it). Reported: first-token median and max per phase, the ratio to idle (goal <= 1.5),
and the chunks embedded per second meanwhile.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

from bench import chat_models

MODEL = os.environ.get("BENCH_CHAT_MODEL", "qwen2.5-0.5b")
RUNS = int(os.environ.get("BENCH_CHAT_RUNS", "6"))
SETTINGS = {"chat first (default)": None, "no priority": "0"}


def _chunks() -> list[str]:
    from llm.tests.e5_texts import real_chunks

    return list(real_chunks())


def _embed_continuously(base_url: str, stop: threading.Event, counted: list[int]) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="local", max_retries=0, timeout=900)
    texts, start = _chunks(), 0
    while not stop.is_set():
        batch = [texts[(start + i) % len(texts)] for i in range(96)]
        start += 96
        client.embeddings.create(model="multilingual-e5-small", input=batch)
        counted.append(len(batch))


def _phase(server: dict, questions: list[dict], indexing: bool) -> dict:
    stop, counted, threads = threading.Event(), [], []
    if indexing:
        for _ in range(2):
            thread = threading.Thread(target=_embed_continuously, args=(server["base_url"], stop, counted))
            thread.start()
            threads.append(thread)
        time.sleep(5)  # the embedding requests are under way
    started = time.perf_counter()
    firsts = [chat_models.ask(server, q)["first_token_s"] for q in questions]
    elapsed = time.perf_counter() - started
    stop.set()
    for thread in threads:
        thread.join()
    return {
        "first_token_median_s": round(statistics.median(firsts), 2),
        "first_token_max_s": round(max(firsts), 2),
        "first_tokens_s": firsts,
        "chunks_embedded_per_s": round(sum(counted) / elapsed, 1) if indexing else None,
    }


def run() -> dict:
    # One more question to warm the server with: a question asked twice is answered from
    # llama.cpp's prompt cache (a first token in 0.05 s), so none is asked twice.
    questions = chat_models.cases(2 * RUNS + 1)[: 2 * RUNS + 1]
    warm_up, questions = questions[-1], questions[:-1]
    results = {}
    for label, wait in SETTINGS.items():
        if wait is None:
            os.environ.pop("LOCAL_CHAT_FIRST_WAIT_SECONDS", None)
        else:
            os.environ["LOCAL_CHAT_FIRST_WAIT_SECONDS"] = wait
        server = chat_models.start_server(MODEL, 1)
        try:
            chat_models.wait_ready(server)
            chat_models.ask(server, warm_up)  # llama.cpp's first request allocates
            idle = _phase(server, questions[:RUNS], indexing=False)
            busy = _phase(server, questions[RUNS:], indexing=True)
        finally:
            chat_models.stop_server(server)
        results[label] = {
            "idle": idle,
            "while_indexing": busy,
            "ratio_median": round(busy["first_token_median_s"] / idle["first_token_median_s"], 2),
        }
    os.environ.pop("LOCAL_CHAT_FIRST_WAIT_SECONDS", None)
    return {"model": MODEL, "runs": RUNS, "load": os.getloadavg(), "results": results}
