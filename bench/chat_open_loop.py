"""Open-loop websocket chat: turns arrive at a steady Poisson rate against the zero-latency
fake model, and the app's own time to first token is measured per rate, with 1 and with 2
web processes (daphne on one listening socket bound here and passed with `--fd`, as
config/run.py's `make run` does).

Also the app's own CPU per turn: the daphne processes' user + system CPU (from /proc) over
the turns of a step, divided by the turns. The client generator runs in a process of its
own (asyncio + websockets over sockets opened before the step starts), and its CPU is
reported too, so it can be seen not to be the bottleneck.

Knobs (environment): CHAT_OPEN_LOOP_RATES ("10,20,30,40,50,60,70,80,100"), CHAT_OPEN_LOOP_SECONDS
(10 per step), CHAT_OPEN_LOOP_PROCESSES ("1,2"), CHAT_OPEN_LOOP_P95_MS (50), and
CHAT_OPEN_LOOP_STOP_MS (1000): the steps go on past the limit, to show the curve, and stop at
the first rate whose p95 passes the stop (or that has errors).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import resource
import subprocess
import sys
import time

from bench.chat_ws import ANSWER_WORDS, _cpu_seconds, _free_port, _prepare_account, _start_web, _stop, _wait
from config.embedded import BASE_DIR

SOCKETS = 96  # open before a step; a turn takes an idle one (a socket answers one turn at a time)
QUESTIONS = [f"What does our policy {i} say?" for i in range(40)]


def _rates() -> list[float]:
    return [float(r) for r in os.environ.get("CHAT_OPEN_LOOP_RATES", "10,20,30,40,50,60,70,80,100").split(",")]


# --- the client generator (its own process) ---------------------------------------------------


async def _client(url: str, key: str, rate: float, seconds: float, seed: int, conn) -> None:
    """Open the sockets, tell the parent (which reads the servers' CPU), run the arrivals when
    it answers, send the results, close the sockets when it answers again."""
    import websockets

    headers = {"Authorization": f"Bearer {key}"}
    idle: asyncio.Queue = asyncio.Queue()
    sockets = await asyncio.gather(
        *[websockets.connect(url, additional_headers=headers, max_size=None) for _ in range(SOCKETS)]
    )
    for ws in sockets:
        idle.put_nowait(ws)
    results: list[dict] = []
    rng = random.Random(seed)
    waited_for_socket = 0

    async def turn(ws, question: str, due: float):
        nonlocal waited_for_socket
        sent = time.perf_counter()
        await ws.send(json.dumps({"type": "chat.message", "message": question}))
        first = None
        token_frames = 0
        while True:
            frame = json.loads(await ws.recv())
            if frame["type"] == "chat.token":
                token_frames += 1
                first = first or time.perf_counter()
            elif frame["type"] in ("chat.done", "chat.error"):
                break
        idle.put_nowait(ws)
        results.append(
            {
                "ok": frame["type"] == "chat.done",
                "error": frame.get("code"),
                "first_token_ms": None if first is None else (first - sent) * 1000,
                "late_ms": (sent - due) * 1000,
                "total_ms": (time.perf_counter() - sent) * 1000,
                "token_frames": token_frames,
            }
        )

    conn.send("ready")
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    due = started
    tasks = []
    while True:
        due += rng.expovariate(rate)
        if due - started > seconds:
            break
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if idle.empty():
            waited_for_socket += 1
        ws = await idle.get()
        tasks.append(asyncio.create_task(turn(ws, QUESTIONS[len(tasks) % len(QUESTIONS)], due)))
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - started
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    conn.send(
        {
            "results": results,
            "wall_s": wall,
            "waited_for_socket": waited_for_socket,
            "client_cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
        }
    )
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    await asyncio.gather(*[ws.close() for ws in sockets])


def _client_process(url, key, rate, seconds, seed, conn) -> None:
    asyncio.run(_client(url, key, rate, seconds, seed, conn))
    conn.close()


def _step(
    url: str,
    key: str,
    rate: float,
    seconds: float,
    pids: list[int],
    seed: int,
    on_go=None,
    model_pid: int | None = None,
) -> dict:
    from bench.common import percentile

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    client = ctx.Process(target=_client_process, args=(url, key, rate, seconds, seed, child))
    client.start()
    assert parent.recv() == "ready"
    time.sleep(0.5)  # the handshakes' own work settles (it is per socket, not per turn)
    if on_go is not None:  # e.g. a profiler attached for the arrivals only
        on_go()
    cpu_before = sum(_cpu_seconds(p) for p in pids)
    model_before = _cpu_seconds(model_pid) if model_pid else 0.0
    parent.send("go")
    outcome = parent.recv()
    server_cpu = sum(_cpu_seconds(p) for p in pids) - cpu_before
    model_cpu = (_cpu_seconds(model_pid) - model_before) if model_pid else 0.0
    parent.send("close")
    client.join()
    results = outcome["results"]
    ok = [r for r in results if r["ok"] and r["first_token_ms"] is not None]
    first = [r["first_token_ms"] for r in ok] or [float("inf")]
    return {
        "rate": rate,
        "turns": len(results),
        "errors": len(results) - len(ok),
        "arrivals_per_s": round(len(results) / seconds, 1),  # the Poisson sample's own rate
        "completed_per_s": round(len(results) / outcome["wall_s"], 1),
        # How late the client sent turns behind their arrival times (a busy generator).
        "client_late_ms_p95": round(percentile([r["late_ms"] for r in results] or [0], 95), 1),
        "first_token_ms": {
            "p50": round(percentile(first, 50), 1),
            "p95": round(percentile(first, 95), 1),
            "max": round(max(first), 1),
        },
        "server_cpu_ms_per_turn": round(server_cpu * 1000 / max(1, len(results)), 2),
        "token_frames_per_turn": round(sum(r["token_frames"] for r in results) / max(1, len(results)), 1),
        "server_cpu_share": round(server_cpu / outcome["wall_s"], 2),
        "client_cpu_share": round(outcome["client_cpu_s"] / outcome["wall_s"], 2),
        "model_server_cpu_share": round(model_cpu / outcome["wall_s"], 2),
        "waited_for_socket": outcome["waited_for_socket"],
    }


def run() -> dict:
    p95_limit = float(os.environ.get("CHAT_OPEN_LOOP_P95_MS", "50"))
    p95_stop = float(os.environ.get("CHAT_OPEN_LOOP_STOP_MS", "1000"))
    seconds = float(os.environ.get("CHAT_OPEN_LOOP_SECONDS", "10"))
    counts = [int(n) for n in os.environ.get("CHAT_OPEN_LOOP_PROCESSES", "1,2").split(",")]
    llm_port = _free_port()
    answer = " ".join(f"word{i}" for i in range(ANSWER_WORDS))
    fake = subprocess.Popen(
        [sys.executable, "-m", "llm.fake_server", "--port", str(llm_port), "--answer", answer],
        cwd=BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    llm_url = f"http://127.0.0.1:{llm_port}/v1"
    report: dict = {}
    try:
        _wait(f"{llm_url}/models", fake)
        key = _prepare_account(llm_url)
        for processes in counts:
            url, web = _start_web(processes, llm_url)
            try:
                pids = [p.pid for p in web]
                _step(url, key, 5, 3, pids, seed=0)  # warm up: connections, imports, plans
                steps = []
                for i, rate in enumerate(_rates()):
                    step = _step(url, key, rate, seconds, pids, seed=i + 1, model_pid=fake.pid)
                    step["load_average"] = os.getloadavg()[0]
                    steps.append(step)
                    print(json.dumps({"processes": processes, **step}), file=sys.stderr, flush=True)
                    if step["errors"] or step["first_token_ms"]["p95"] >= p95_stop:
                        break
                passing = [s["rate"] for s in steps if not s["errors"] and s["first_token_ms"]["p95"] < p95_limit]
                report[f"{processes}_web_processes"] = {
                    "highest_rate_under_p95_limit": max(passing, default=0),
                    "steps": steps,
                }
            finally:
                _stop(web)
    finally:
        fake.terminate()
        fake.wait(10)
    report["settings"] = (
        f"Poisson arrivals, {seconds:g} s a step, {SOCKETS} API-key sockets opened before each "
        f"step, fake model server (zero latency, {ANSWER_WORDS}-word answers), lookup route; "
        f"p95 limit {p95_limit:g} ms; client generator in its own process"
    )
    return report
