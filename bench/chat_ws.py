"""50 concurrent websocket chats against a zero-latency model server: the app's own time to
first token (p50/p95) and tokens per second relayed, with 1 and with 2 web processes
(CHAT_WS_PROCESSES, "1,2"; daphne on one listening socket bound here and passed with
`--fd`, as `make run` starts WEB_PROCESSES of them), and the web processes' CPU per chat.

The model server is the deterministic fake in its own process (answers at once, 100 words
a reply, one word per chunk), so what is measured is Groundwork: the socket's handshake
(each chat opens its own), auth, routing, credit hold, query embedding, hybrid search,
prompt building, relaying, settling and persisting.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

from config.embedded import BASE_DIR

CLIENTS = 50
ROUNDS = 3
ANSWER_WORDS = 100


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(url: str, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{url}: process exited"
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start_web(processes: int, llm_url: str) -> tuple[str, list[subprocess.Popen]]:
    """`processes` daphne processes on one listening socket (config.run's helpers); limits
    that would refuse a benchmark's load (rates, sockets per key) raised."""
    from config.run import listening_socket, spawn_web

    port = _free_port()
    env = dict(
        os.environ,
        LLM_BASE_URL=llm_url,
        CHAT_RATE_PER_USER="1000000/min",
        CHAT_RATE_PER_ACCOUNT="1000000/min",
        WS_MAX_SOCKETS_PER_PRINCIPAL="10000",
        LOG_LEVEL="WARNING",
        GROUNDWORK_LOCAL="1",
    )
    sock = listening_socket("127.0.0.1", port)
    web = [spawn_web(sock, env, i + 1, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(processes)]
    sock.close()
    for process in web:
        _wait(f"http://127.0.0.1:{port}/healthz", process)
    return f"ws://127.0.0.1:{port}/ws/chat/", web


def _stop(processes: list[subprocess.Popen]) -> None:
    from config.run import stop_children

    stop_children([("web", p) for p in processes])


def _prepare_account(llm_url: str) -> str:
    """An account with a handbook in its knowledge base and an API key."""
    from django.conf import settings
    from django.core.files.uploadedfile import SimpleUploadedFile

    from accounts.models import User
    from accounts.services import account_create, api_key_create
    from core.tenancy import account_context
    from documents.ingestion import ingest
    from documents.services import document_upload

    settings.LLM_BASE_URL = llm_url
    owner = User.objects.create_user(email=f"bench-chat-{time.time_ns()}@bench.test", password=None)
    account = account_create(name="bench chat", owner=owner, initial_credits=50_000_000)
    text = "\n\n".join(
        f"# Policy {i}\n\nOur policy number {i} says employees get {i} extra days. " * 3 for i in range(40)
    )
    with account_context(account):
        document, _ = document_upload(
            account=account,
            actor=None,
            upload=SimpleUploadedFile(f"handbook-{time.time_ns()}.md", text.encode(), content_type="text/markdown"),
        )
        _, raw = api_key_create(account=account, actor=None, name="bench")
    ingest(account_id=account.pk, document_id=document.pk, revision=document.revision)
    return raw


async def _one_chat(url: str, key: str, question: str) -> dict:
    import websockets

    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"}, max_size=None) as ws:
        sent = time.perf_counter()
        await ws.send(json.dumps({"type": "chat.message", "message": question}))
        first = None
        tokens = 0
        while True:
            frame = json.loads(await ws.recv())
            if frame["type"] == "chat.token":
                first = first or time.perf_counter()
                tokens += len(frame["text"].split())
            elif frame["type"] in ("chat.done", "chat.error"):
                assert frame["type"] == "chat.done", frame
                return {
                    "first_token_ms": (first - sent) * 1000,
                    "total_s": time.perf_counter() - sent,
                    "tokens": tokens,
                }


async def _round(url: str, key: str) -> tuple[list[dict], float]:
    started = time.perf_counter()
    results = await asyncio.gather(
        *[_one_chat(url, key, f"What does our policy {i % 40} say?") for i in range(CLIENTS)]
    )
    return results, time.perf_counter() - started


def _measure(url: str, key: str, pids: list[int]) -> dict:
    from bench.common import percentile

    single = [asyncio.run(_one_chat(url, key, "What does our policy 3 say?")) for _ in range(5)]
    cpu_before = sum(_cpu_seconds(p) for p in pids)
    rounds = [asyncio.run(_round(url, key)) for _ in range(ROUNDS)]
    cpu = sum(_cpu_seconds(p) for p in pids) - cpu_before
    results = [r for round_results, _ in rounds for r in round_results]
    first = [r["first_token_ms"] for r in results]
    tokens = sum(r["tokens"] for r in results)
    wall = sum(seconds for _, seconds in rounds)
    return {
        "single_client_first_token_ms_p50": round(percentile([r["first_token_ms"] for r in single], 50), 1),
        "concurrent_first_token_ms": {
            "p50": round(percentile(first, 50), 1),
            "p95": round(percentile(first, 95), 1),
            "max": round(max(first), 1),
        },
        "tokens_relayed_per_s": round(tokens / wall),
        "chats_per_s": round(len(results) / wall, 1),
        "server_cpu_ms_per_chat": round(cpu * 1000 / len(results), 1),
        "load_average": os.getloadavg()[0],
    }


def run() -> dict:
    llm_port = _free_port()
    answer = " ".join(f"word{i}" for i in range(ANSWER_WORDS))
    fake = subprocess.Popen(
        [sys.executable, "-m", "llm.fake_server", "--port", str(llm_port), "--answer", answer],
        cwd=BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    llm_url = f"http://127.0.0.1:{llm_port}/v1"
    report = {}
    try:
        _wait(f"{llm_url}/models", fake)
        key = _prepare_account(llm_url)
        for processes in [int(n) for n in os.environ.get("CHAT_WS_PROCESSES", "1,2").split(",")]:
            url, web = _start_web(processes, llm_url)
            try:
                report[f"{processes}_web_processes"] = _measure(url, key, [p.pid for p in web])
            finally:
                _stop(web)
    finally:
        fake.terminate()
        fake.wait(10)
    report["settings"] = (
        f"{CLIENTS} concurrent websocket chats (a new socket each) x {ROUNDS} rounds, daphne "
        f"processes on one socket, fake model server (zero latency, {ANSWER_WORDS}-word answers), "
        "lookup route (query embedding + hybrid search)"
    )
    return report
