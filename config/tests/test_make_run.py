"""`make run` end to end: a real supervisor process on a fresh data folder, twice.

It starts its own embedded PostgreSQL (in a temporary .data), migrates, ensures the demo
account, serves HTTP with a worker, and on Ctrl-C stops every process it started.
"""

import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from config.embedded import BASE_DIR
from config.testing import installation_env

pytestmark = [pytest.mark.system, pytest.mark.slow]


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


class Supervisor:
    """`make run` as a person sees it: a process and the lines it prints."""

    def __init__(self, data_dir: Path, port: int, local_models: bool = False):
        self.process = _start(data_dir, port, local_models)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            assert self.process.poll() is None, self.output
            assert time.monotonic() < deadline, f"never printed {text!r}:\n{self.output}"
            time.sleep(0.2)


def _start(data_dir: Path, port: int, local_models: bool = False) -> subprocess.Popen:
    """`make run` on `data_dir`; with `local_models`, LLM_BASE_URL is unset, so it starts the
    bundled local model server (on a free port it chooses)."""
    env = installation_env(
        data_dir, PORT=port, DEMO_PASSWORD="Demo-pass-for-tests-1", WEB_PROCESSES=2, WORKER_PROCESSES=2
    )
    if not local_models:
        env["LLM_BASE_URL"] = "http://127.0.0.1:9/v1"
    return subprocess.Popen(
        [sys.executable, "-m", "config.run"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _health(port) -> dict:
    import json

    status, body = _get(f"http://127.0.0.1:{port}/healthz")
    assert status == 200, body
    return json.loads(body)


def _stop_and_check_nothing_left(run: Supervisor, data_dir: Path) -> None:
    process = run.process
    children = psutil.Process(process.pid).children(recursive=True)
    assert len(children) >= 5, "expected 2 web, 2 worker and cron processes"
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0, run.output
    run.reader.join(timeout=10)
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    assert not (data_dir / "postgres" / "postmaster.pid").exists(), "embedded PostgreSQL still running"
    assert "stopped" in run.output.splitlines()[-1]


def _child(run: Supervisor, *words: str) -> psutil.Process:
    for child in psutil.Process(run.process.pid).children():
        if all(word in " ".join(child.cmdline()) for word in words):
            return child
    raise AssertionError(f"no child process running {words}")


def _workers(run: Supervisor) -> set[int]:
    return {
        child.pid for child in psutil.Process(run.process.pid).children() if "rqworker" in " ".join(child.cmdline())
    }


def _killed_processes_are_started_again(run: Supervisor, port: int, models_port: int) -> None:
    """The model server and a worker killed (SIGKILL, as the OOM killer does): the supervisor
    starts each again, on the same port for the models (the app's LLM_BASE_URL stays right),
    and the run goes on."""
    models = _child(run, "llm.local_server")
    worker = _child(run, "rqworker")
    models.kill()
    worker.kill()
    run.wait_for("models exited with code -9; starting it again", timeout=30)
    run.wait_for("models started again", timeout=30)
    deadline = time.monotonic() + 300
    while _get(f"http://127.0.0.1:{models_port}/v1/models")[0] != 200:
        assert run.process.poll() is None, run.output
        assert time.monotonic() < deadline, f"the model server did not come back:\n{run.output}"
        time.sleep(0.5)
    assert _child(run, "llm.local_server").pid != models.pid
    deadline = time.monotonic() + 60
    while len(_workers(run) - {worker.pid}) != 2:  # rq's record of the killed one expires later
        assert time.monotonic() < deadline, f"the worker did not come back:\n{run.output}"
        time.sleep(0.5)
    assert _health(port)["status"] == "ok"
    assert "exited with code -9; starting it again" in run.output


def test_make_run_twice_serves_and_stops_cleanly(tmp_path):
    data_dir = tmp_path / "data"
    port = _free_port()
    first = Supervisor(data_dir, port, local_models=True)
    try:
        first.wait_for(f"running at http://127.0.0.1:{port}/", timeout=300)
        models_port = int(re.search(r"local models ready on http://127\.0\.0\.1:(\d+)/v1", first.output).group(1))
        status, models = _get(f"http://127.0.0.1:{models_port}/v1/models")
        assert status == 200 and "smollm2-135m-instruct" in models
        health = _health(port)
        assert health["status"] == "ok" and health["database"] == "ok" and health["redis"] == "ok"
        assert health["workers"] == 2 and health["web_processes"] == 2  # WEB_PROCESSES, WORKER_PROCESSES
        assert "2 web and 2 worker processes" in first.output
        status, page = _get(f"http://127.0.0.1:{port}/login/")
        assert status == 200 and "Log in" in page
        assert "demo@example.com / Demo-pass-for-tests-1" in first.output
        _killed_processes_are_started_again(first, port, models_port)
    finally:
        if first.process.poll() is None:
            _stop_and_check_nothing_left(first, data_dir)
    assert _get(f"http://127.0.0.1:{models_port}/v1/models")[0] is None, "the model server outlived make run"

    started = time.monotonic()
    second = Supervisor(data_dir, port)
    try:
        second.wait_for(f"running at http://127.0.0.1:{port}/")
        reuse_seconds = time.monotonic() - started
        assert "starting embedded PostgreSQL" in second.output  # the first run stopped it
    finally:
        if second.process.poll() is None:
            _stop_and_check_nothing_left(second, data_dir)
    assert reuse_seconds < 60
