"""`make run` end to end: a real supervisor process on a fresh data folder, twice.

It starts its own embedded PostgreSQL (in a temporary .data), migrates, ensures the demo
account, serves HTTP with a worker, and on Ctrl-C stops every process it started.
"""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from config.embedded import BASE_DIR

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return None, ""


def _start(data_dir: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "GROUNDWORK_TESTING", "GROUNDWORK_LOCAL")}
    env.update(GROUNDWORK_DATA_DIR=str(data_dir), PORT=str(port), DEMO_PASSWORD="Demo-pass-for-tests-1",
               LLM_BASE_URL="http://127.0.0.1:9/v1")
    return subprocess.Popen([sys.executable, "-m", "config.run"], cwd=BASE_DIR, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _wait_healthy(process, port, timeout=90) -> dict:
    import json

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        status, body = _get(f"http://127.0.0.1:{port}/healthz")
        if status == 200 and json.loads(body)["workers"] >= 1:
            return json.loads(body)
        time.sleep(0.5)
    raise AssertionError("make run did not become healthy in time")


def _stop_and_check_nothing_left(process, data_dir: Path):
    children = psutil.Process(process.pid).children(recursive=True)
    assert children, "expected web and worker processes"
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    assert not (data_dir / "postgres" / "postmaster.pid").exists(), "embedded PostgreSQL still running"
    return output


def test_make_run_twice_serves_and_stops_cleanly(tmp_path):
    data_dir = tmp_path / "data"
    port = _free_port()
    first = _start(data_dir, port)
    try:
        health = _wait_healthy(first, port)
        assert health == {"status": "ok", "database": "ok", "redis": "ok", "workers": health["workers"]}
        status, page = _get(f"http://127.0.0.1:{port}/login/")
        assert status == 200 and "Log in" in page
    finally:
        if first.poll() is None:
            output = _stop_and_check_nothing_left(first, data_dir)
    assert "demo@example.com / Demo-pass-for-tests-1" in output
    assert f"running at http://127.0.0.1:{port}/" in output

    started = time.monotonic()
    second = _start(data_dir, port)
    try:
        _wait_healthy(second, port)
        reuse_seconds = time.monotonic() - started
    finally:
        if second.poll() is None:
            _stop_and_check_nothing_left(second, data_dir)
    assert reuse_seconds < 60
