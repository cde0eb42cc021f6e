"""The app's own CPU for one chat turn, without the websocket: the turn an API-key socket runs
(`chat.consumers._SocketTurn`: the principal re-check, route, hold, query embedding, hybrid
search, prompt, the model's streamed answer through the guard, settle, the stored messages),
run in this process one after another against the zero-latency fake model, as the web
process's worker thread runs it. Reports the thread's CPU and the wall time per turn, so a
change to the turn can be measured apart from daphne's relaying (bench/chat_open_loop.py
measures the whole web process).

Also where a turn's time goes, step by step (`steps`: wall and thread-CPU p50 of each of the
turn's parts, timed by wrapping them in chat.agent for the measured turns; the wrappers'
own cost is in the totals too, a few microseconds a step).

Knobs: CHAT_TURN_CPU_TURNS (200; after 20 warm-up turns).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import statistics
import subprocess
import sys
import time

from bench.chat_ws import ANSWER_WORDS, _free_port, _prepare_account, _wait
from config.embedded import BASE_DIR

# The parts of a turn (chat.agent's own names), in the order they run.
# query_embed: the query's embedding, drawn from the hold (retrieval.search.query_embed);
# turn_retrieve: the search and the passages (query_search with that embedding, expansion).
STEPS = (
    "check_chat_rate",
    "_conversation",
    "credits_hold",
    "query_embed",
    "turn_retrieve",
    "build_messages",
    "turn_finish",
)


@contextlib.contextmanager
def _timed_steps(timings: dict):
    """chat.agent's steps wrapped to record (wall ms, thread CPU ms) per call; unwrapped after."""
    from chat import agent, driver

    originals = {name: getattr(agent, name) for name in STEPS}

    def wrap(name, func):
        @functools.wraps(func)
        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return func(*args, **kwargs)
            finally:
                timings[name].append(((time.perf_counter() - wall) * 1000, (time.thread_time() - cpu) * 1000))

        return timed

    for name, func in originals.items():
        setattr(agent, name, wrap(name, func))
    driver.turn_finish = agent.turn_finish  # the driver imported it by name
    try:
        yield
    finally:
        for name, func in originals.items():
            setattr(agent, name, func)
        driver.turn_finish = originals["turn_finish"]


def run() -> dict:
    from django.conf import settings

    from accounts.resolution import resolve_api_key
    from chat.agent import TurnOptions, profile
    from chat.consumers import Principal, _SocketTurn

    turns = int(os.environ.get("CHAT_TURN_CPU_TURNS", "200"))
    port = _free_port()
    answer = " ".join(f"word{i}" for i in range(ANSWER_WORDS))
    fake = subprocess.Popen(
        [sys.executable, "-m", "llm.fake_server", "--port", str(port), "--answer", answer],
        cwd=BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    # As a web process with LLM_BASE_URL set runs it (bench/chat_open_loop.py): no limits in the way.
    settings.LLM_BUNDLED = False
    settings.CHAT_RATE_PER_USER = settings.CHAT_RATE_PER_ACCOUNT = "1000000/min"
    try:
        _wait(f"{url}/models", fake)
        raw = _prepare_account(url)
        resolved = resolve_api_key(raw)
        principal = Principal(account=resolved.account, api_key=resolved.api_key)

        def one(i: int) -> tuple[float, float]:
            cpu, wall = time.thread_time(), time.perf_counter()
            run = _SocketTurn(
                principal=principal,
                account=principal.account,
                api_key=principal.api_key,
                question=f"What does our policy {i % 40} say?",
                options=TurnOptions(),
            )
            for _ in run.frames():
                pass
            assert run.done is not None, run.error
            return time.thread_time() - cpu, time.perf_counter() - wall

        for i in range(20):
            one(i)
        measured = [one(i) for i in range(turns)]
        timings: dict = collections.defaultdict(list)
        with _timed_steps(timings):
            for i in range(turns):
                one(i)
    finally:
        fake.terminate()
        fake.wait(10)
    cpu = [c * 1000 for c, _ in measured]
    wall = [w * 1000 for _, w in measured]
    return {
        "turns": turns,
        "cpu_ms_per_turn": {"mean": round(statistics.mean(cpu), 2), "p50": round(statistics.median(cpu), 2)},
        "wall_ms_per_turn": {"mean": round(statistics.mean(wall), 2), "p50": round(statistics.median(wall), 2)},
        # A second pass of as many turns, its steps timed (the totals above are unwrapped).
        "steps": {
            name: {
                "calls_per_turn": round(len(timings[name]) / turns, 2),
                "wall_ms_p50": round(statistics.median(w for w, _ in timings[name]), 3),
                "cpu_ms_p50": round(statistics.median(c for _, c in timings[name]), 3),
            }
            for name in STEPS
            if timings[name]
        },
        "load_average": os.getloadavg()[0],
        "settings": f"API-key turn, lookup route, {profile().name} profile, fake model server "
        f"({ANSWER_WORDS}-word answers), one turn at a time in this process",
    }
