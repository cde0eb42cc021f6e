"""PostgreSQL connections held by the web processes during and after a long session of use:
two daphne processes (as `make run` starts them on a 2-core machine)
serve a mixed load (REST lists, search, chats over the websocket and REST, pages) from 16
clients at once; a sampler counts the app role's connections to the bench database every
0.2 s, then after the load the idle ones that stay.

Run twice: as before the pool (persistent connections per thread, CONN_MAX_AGE=60,
`DATABASE_POOL_MAX_SIZE=0`) and with the pool (the default, 8 per process).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

WEB_PROCESSES = 2
CLIENTS = 16
REQUESTS = 1200  # one person's long session is a few hundred; this is several people's
IDLE_WAIT_SECONDS = 15
APP_NAME = "bench-connections-web"


def _app_connections() -> tuple[int, int]:
    """(all, idle) connections of the web processes (their libpq application name) to this database."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE state = 'idle') FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            [APP_NAME],
        )
        return cursor.fetchone()


def _request(base: str, key: str, i: int) -> int:
    """The response's status (a 5xx is counted, not raised: running out of connections shows as one)."""
    kind = i % 6
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if kind == 0:
        request = urllib.request.Request(f"{base}/api/v1/documents/", headers=headers)
    elif kind == 1:
        request = urllib.request.Request(f"{base}/api/v1/credits/", headers=headers)
    elif kind in (2, 3):
        body = json.dumps({"query": f"What does our policy {i % 40} say?"}).encode()
        request = urllib.request.Request(f"{base}/api/v1/search/", data=body, headers=headers, method="POST")
    elif kind == 4:
        body = json.dumps({"message": f"How many extra days does policy {i % 40} give?"}).encode()
        request = urllib.request.Request(f"{base}/api/v1/chat/", data=body, headers=headers, method="POST")
    else:
        request = urllib.request.Request(f"{base}/api/v1/conversations/", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def _websocket_chats(url: str, key: str, n: int) -> None:
    import websockets

    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        for i in range(n):
            await ws.send(json.dumps({"type": "chat.message", "message": f"What about policy {i % 40}?"}))
            while json.loads(await ws.recv())["type"] not in ("chat.done", "chat.error"):
                pass


def _session(pool_size: int, llm_url: str, key: str) -> dict:
    from django.db import connection

    from bench.chat_ws import _free_port, _wait
    from config.run import listening_socket, spawn_web

    port = _free_port()
    env = dict(
        os.environ,
        PGAPPNAME=APP_NAME,
        LLM_BASE_URL=llm_url,
        DATABASE_POOL_MAX_SIZE=str(pool_size),
        LOG_LEVEL="WARNING",
        CHAT_RATE_PER_USER="100000/min",
        CHAT_RATE_PER_ACCOUNT="100000/min",
        API_RATE_LIMIT="100000/min",
        WS_MAX_SOCKETS_PER_PRINCIPAL="1000",
        GROUNDWORK_LOCAL="1",
    )
    sock = listening_socket("127.0.0.1", port)
    log = open(f"/tmp/bench-connections-web-{pool_size}.log", "w")
    webs = [spawn_web(sock, env, i + 1, stdout=log, stderr=subprocess.STDOUT) for i in range(WEB_PROCESSES)]
    sock.close()
    samples: list[tuple[int, int]] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(_app_connections())
            time.sleep(0.2)
        connection.close()

    try:
        _wait(f"http://127.0.0.1:{port}/healthz", webs[0])
        sampler = threading.Thread(target=sample)
        sampler.start()
        base = f"http://127.0.0.1:{port}"
        started = time.perf_counter()

        async def four_sockets():
            await asyncio.gather(*[_websocket_chats(f"ws://127.0.0.1:{port}/ws/chat/", key, 25) for _ in range(4)])

        sockets = threading.Thread(target=asyncio.run, args=(four_sockets(),))
        sockets.start()
        with ThreadPoolExecutor(CLIENTS) as pool:
            statuses = list(pool.map(lambda i: _request(base, key, i), range(REQUESTS)))
        sockets.join()
        seconds = time.perf_counter() - started
        time.sleep(IDLE_WAIT_SECONDS)
        stop.set()
        sampler.join()
        after = _app_connections()
    finally:
        for web in webs:
            web.terminate()
            web.wait(15)
    return {
        "requests": REQUESTS + 100,
        "seconds": round(seconds, 1),
        "max_connections_during_load": max(total for total, _ in samples),
        "connections_after_idle": after[0],
        "idle_after": after[1],
        "server_errors": sum(1 for status in statuses if status >= 500),
        "max_connections": _max_connections(),
    }


def _max_connections() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        return int(cursor.fetchone()[0])


def run() -> dict:
    from bench.chat_ws import _prepare_account
    from llm.fake_server import FakeOpenAIServer

    with FakeOpenAIServer(answer=" ".join(f"word{i}" for i in range(30))) as model:
        key = _prepare_account(model.base_url)
        from django.db import connection

        connection.close()  # count the web processes' connections only
        before = _session(0, model.base_url, key)
        after = _session(8, model.base_url, key)
    return {
        "before (persistent connection per thread, CONN_MAX_AGE=60)": before,
        "after (pool, DATABASE_POOL_MAX_SIZE=8 per process)": after,
        "settings": f"{WEB_PROCESSES} daphne processes on one socket, {CLIENTS} HTTP clients + 4 websockets at once, "
        f"{REQUESTS} REST requests (lists, credits, search, chat, conversations) + 100 websocket chats, "
        f"fake model server in the bench process; idle count {IDLE_WAIT_SECONDS} s after the load",
        "load_average": os.getloadavg()[0],
    }
