"""`make run`: the whole product on this machine, on embedded defaults.

Starts what is not configured (PostgreSQL, Redis, the local model server), migrates,
ensures the demo account, then runs daphne (HTTP + websocket) and an rq worker with the
scheduler, and the periodic jobs of config/cron.py. Ctrl-C (or SIGTERM) stops every process it started; nothing is left behind.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

from config.embedded import BASE_DIR, Started, ensure_services, load_dotenv, log, stop_services

PYTHON = sys.executable


def _spawn(name: str, argv: list[str], env: dict) -> tuple[str, subprocess.Popen]:
    # Each child leads its own process group, so stopping it stops its children too.
    return name, subprocess.Popen(argv, cwd=BASE_DIR, env=env, start_new_session=True)


def _manage(*args: str, env: dict) -> None:
    subprocess.run([PYTHON, "manage.py", *args], cwd=BASE_DIR, env=env, check=True)


def _wait_http(url: str, timeout: float, process: subprocess.Popen, ready=lambda body: True) -> bool:
    """Poll `url` until it answers 200 and `ready(body)` holds, or the process dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200 and ready(response.read()):
                    return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def _worker_registered(body: bytes) -> bool:
    return json.loads(body).get("workers", 0) >= 1


def _stop(children: list[tuple[str, subprocess.Popen]]) -> None:
    for _, process in children:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 15
    for name, process in children:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log(f"{name} did not stop in time; killing it")
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_model_server(env: dict, children: list) -> None:
    """The bundled local models, when no provider is configured (LLM_BASE_URL unset)."""
    if env.get("LLM_BASE_URL"):
        return
    # A free port unless one is asked for: a second `make run` (another PORT) must not find
    # the first one's model server answering on a fixed port.
    port = env.get("LOCAL_LLM_PORT") or str(_free_port())
    name, process = _spawn("models", [PYTHON, "-m", "llm.local_server", "--host", "127.0.0.1", "--port", port], env)
    children.append((name, process))
    env["LLM_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
    env["GROUNDWORK_BUNDLED_MODELS"] = "1"
    env.setdefault("LLM_API_KEY", "local")
    log("warming up the local models…")
    if not _wait_http(f"http://127.0.0.1:{port}/healthz", 300, process):
        raise RuntimeError("the local model server did not become healthy; see its output above")


def main() -> int:
    load_dotenv()
    started = Started()
    children: list[tuple[str, subprocess.Popen]] = []
    stopping = False

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        ensure_services(started)
        env = dict(os.environ, GROUNDWORK_LOCAL=os.environ.get("GROUNDWORK_LOCAL", "1"), PYTHONUNBUFFERED="1")
        port = env.get("PORT", "8000")
        _start_model_server(env, children)
        _manage("migrate", "--no-input", "-v", "0", env=env)
        _manage("ensure_demo", env=env)
        children.append(_spawn("worker", [PYTHON, "manage.py", "rqworker", "default", "--with-scheduler"], env))
        children.append(_spawn("cron", [PYTHON, "manage.py", "rqcron", "config.cron"], env))
        children.append(_spawn("web", [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", port, "config.asgi:application"], env))
        web = children[-1][1]
        if not _wait_http(f"http://127.0.0.1:{port}/healthz", 90, web, ready=_worker_registered):
            raise RuntimeError("the web server or the worker did not come up; see the output above")
        log(f"Groundwork is running at http://127.0.0.1:{port}/  (Ctrl-C stops everything)")
        while True:
            for name, process in children:
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {process.returncode}")
            time.sleep(1)
    except KeyboardInterrupt:
        stopping = True
        log("stopping…")
        return 0
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        log(f"error: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop(children)
        stop_services(started)
        if stopping:
            log("stopped")


if __name__ == "__main__":
    sys.exit(main())
