"""`make run`: the whole product on this machine, on embedded defaults.

Starts what is not configured (PostgreSQL, Redis, the local model server), migrates,
ensures the demo account, then runs WEB_PROCESSES daphne processes (HTTP + websocket) on one
port, WORKER_PROCESSES rq workers (the scheduler among them), and the periodic jobs of
config/cron.py. A process that dies is started again (`watch`). Ctrl-C (or SIGTERM) stops
every process it started; nothing is left behind.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from config.embedded import BASE_DIR, DATA_DIR, Started, ensure_services, load_dotenv, log, stop_services

PYTHON = sys.executable


def metrics_dir(env: dict, name: str, *, clean: bool = True) -> str:
    """PROMETHEUS_MULTIPROC_DIR for the processes about to start (core/metrics.py): the one
    set in the environment, else a folder of this install's data dir. Emptied first (`clean`):
    files left by an earlier run would be summed into this one's counts."""
    folder = env.get("PROMETHEUS_MULTIPROC_DIR") or str(DATA_DIR / "prometheus" / name)
    if clean:
        shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, exist_ok=True)
    env["PROMETHEUS_MULTIPROC_DIR"] = folder
    return folder


def mark_dead(process: subprocess.Popen) -> None:
    """prometheus_client's mark_process_dead for a child that has exited (its live gauges go)."""
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
    if not folder:
        return
    from prometheus_client import multiprocess

    for identifier in (process.pid, f"{process.pid}-jobs"):
        multiprocess.mark_process_dead(identifier, folder)


_PRCTL = None  # libc's prctl, loaded by children_die_with_this_process() (Linux only)
_SUPERVISOR_PID = 0


def _die_with_supervisor(signum: int) -> None:
    """In a child before exec: `signum` when the supervisor dies, even by SIGKILL
    (PR_SET_PDEATHSIG), so that a killed supervisor leaves no web process or worker behind."""
    _PRCTL(1, signum, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    if os.getppid() != _SUPERVISOR_PID:  # it died before the line above
        os.kill(os.getpid(), signum)


def _child_options(signum: int = signal.SIGTERM) -> dict:
    if _PRCTL is None:
        return {}
    return {"preexec_fn": functools.partial(_die_with_supervisor, signum)}


def children_die_with_this_process() -> None:
    """From now on, what spawn()/spawn_web() start gets SIGTERM when this process dies."""
    global _PRCTL, _SUPERVISOR_PID
    if sys.platform.startswith("linux"):
        import ctypes

        _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
        _SUPERVISOR_PID = os.getpid()


def spawn(name: str, argv: list[str], env: dict) -> tuple[str, subprocess.Popen]:
    # Each child leads its own process group, so stopping it stops its children too; the
    # terminal's Ctrl-C reaches the supervisor only, which stops them in order.
    return name, subprocess.Popen(argv, cwd=BASE_DIR, env=env, start_new_session=True, **_child_options())


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


def registered_pids(redis_url: str, cache_prefix: str) -> tuple[set[int], set[int]]:
    """(pids of the rq workers, pids of the web processes) of this machine registered on the
    Redis at `redis_url`: rq's worker records, and core/presence.py's entries (its key is the
    cache prefix's, CACHE_PREFIX)."""
    import redis

    connection = redis.Redis.from_url(redis_url)
    host = socket.gethostname()
    workers = set()
    for key in connection.smembers("rq:workers"):
        pid, hostname = connection.hmget(key, "pid", "hostname")
        if pid and hostname and hostname.decode() == host:
            workers.add(int(pid))
    web = set()
    for member in connection.zrangebyscore(f"{cache_prefix}:web-processes", time.time(), "+inf"):
        name, _, pid = member.decode().rpartition(":")
        if name == host and pid.isdigit():
            web.add(int(pid))
    return workers, web


def _all_registered(web: list[subprocess.Popen], workers: list[subprocess.Popen], env: dict):
    """Ready once this supervisor's own web processes and workers have registered: on a Redis
    shared with another node, that node's processes do not count."""

    def ready(body: bytes) -> bool:
        registered_workers, registered_web = registered_pids(env["REDIS_URL"], env.get("CACHE_PREFIX", "groundwork"))
        return {p.pid for p in workers} <= registered_workers and {p.pid for p in web} <= registered_web

    return ready


def process_count(name: str) -> int:
    """WEB_PROCESSES / WORKER_PROCESSES: a positive number, by default the number of cores."""
    value = os.environ.get(name, "").strip()
    if not value:
        return max(1, os.cpu_count() or 1)
    if not value.isdigit() or int(value) < 1:
        raise RuntimeError(f"{name} must be a whole number of at least 1, not {value!r}")
    return int(value)


def listening_socket(host: str, port: int) -> socket.socket:
    """One listening socket that every web process accepts from (daphne --fd): the kernel
    hands each new connection to whichever process is free. No SO_REUSEPORT: with it, a
    second `make run` on the same port would silently share the first one's traffic instead
    of failing to start."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise RuntimeError(
            f"cannot listen on {host}:{port} ({exc.strerror}); is another server using it? Set PORT to a free port."
        ) from None
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def spawn_web(sock: socket.socket, env: dict, index: int, **popen) -> subprocess.Popen:
    """One daphne process serving the ASGI app on the shared listening socket."""
    argv = [PYTHON, "-m", "daphne", "--fd", str(sock.fileno()), "config.asgi:application"]
    popen.setdefault("start_new_session", True)
    # SIGKILL: a daphne that got SIGTERM can wait on its open application instances for good,
    # and with the supervisor gone nobody would escalate (the workers get SIGTERM: a warm
    # shutdown finishes the job at hand).
    for key, value in _child_options(signal.SIGKILL).items():
        popen.setdefault(key, value)
    return subprocess.Popen(
        argv, cwd=BASE_DIR, env=dict(env, WEB_PROCESS_INDEX=str(index)), pass_fds=(sock.fileno(),), **popen
    )


def worker_argv() -> list[str]:
    # Every worker may run the scheduler: rq lets one hold its lock at a time.
    return [PYTHON, "manage.py", "rqworker", "default", "--with-scheduler"]


STOP_SECONDS = 15  # how long the children get to stop after SIGTERM, before SIGKILL
HURRY_SECONDS = 2  # the same after a second Ctrl-C


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def stop_children(children: list[tuple[str, subprocess.Popen]], hurry=lambda: False) -> None:
    """SIGTERM to every child's process group, then SIGKILL to those still running after
    STOP_SECONDS (HURRY_SECONDS once `hurry()` holds: a second Ctrl-C)."""
    for _, process in children:
        if process.poll() is None:
            _signal_group(process, signal.SIGTERM)
    started = time.monotonic()
    while any(process.poll() is None for _, process in children):
        bound = HURRY_SECONDS if hurry() else STOP_SECONDS
        if time.monotonic() - started >= bound:
            break
        time.sleep(0.1)
    for name, process in children:
        if process.poll() is None:
            log(f"{name} did not stop in time; killing it")
        # The group too: a worker's work horse, a daphne's own children.
        _signal_group(process, signal.SIGKILL)
        process.wait()
    for _, process in children:
        mark_dead(process)


# A child that exits is started again (make run), after a pause that grows with the exits of
# the last RESTART_WINDOW_SECONDS (1 s, 2 s, 5 s, 10 s, then every 30 s): a child that cannot
# start (its PostgreSQL or Redis still down) is tried again without flooding the log, and the
# run never gives up on it (docs/operations/reliability.md).
RESTART_PAUSES = (1, 2, 5, 10, 30)
RESTART_WINDOW_SECONDS = 120


def watch(children: list[tuple[str, subprocess.Popen]], respawn: dict | None = None) -> None:
    """Until a child exits: then RuntimeError (the caller stops the rest), unless `respawn`
    (name -> a function that starts that child again) names it: then it is started again,
    after a pause, in its place in `children`."""
    respawn = respawn or {}
    exits: dict[str, list[float]] = {}
    due: dict[str, float] = {}  # name -> when it starts again
    while True:
        now = time.monotonic()
        for index, (name, process) in enumerate(children):
            if name in due:
                if now >= due[name]:
                    del due[name]
                    children[index] = (name, respawn[name]())
                    log(f"{name} started again (pid {children[index][1].pid})")
                continue
            if process.poll() is None:
                continue
            if name not in respawn:
                raise RuntimeError(f"{name} exited with code {process.returncode}")
            mark_dead(process)
            exits[name] = [t for t in exits.get(name, []) if now - t < RESTART_WINDOW_SECONDS] + [now]
            pause = RESTART_PAUSES[min(len(exits[name]), len(RESTART_PAUSES)) - 1]
            log(f"{name} exited with code {process.returncode}; starting it again in {pause} s")
            due[name] = now + pause
        time.sleep(0.5)


def _spawned(argv: list[str], env: dict) -> subprocess.Popen:
    return spawn("", argv, env)[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_model_server(env: dict, children: list, respawn: dict) -> None:
    """The bundled local models, when no provider is configured (LLM_BASE_URL unset). Started
    again on the same port if it dies (`respawn`): the app's LLM_BASE_URL stays right."""
    if env.get("LLM_BASE_URL"):
        return
    # A free port unless one is asked for: a second `make run` (another PORT) must not find
    # the first one's model server answering on a fixed port.
    port = env.get("LOCAL_LLM_PORT") or str(_free_port())
    argv = [PYTHON, "-m", "llm.local_server", "--host", "127.0.0.1", "--port", port]
    name, process = spawn("models", argv, env)
    respawn[name] = functools.partial(_spawned, argv, env)
    children.append((name, process))
    env["LLM_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
    env["GROUNDWORK_BUNDLED_MODELS"] = "1"
    env.setdefault("LLM_API_KEY", "local")
    log("warming up the local models…")
    if not _wait_http(f"http://127.0.0.1:{port}/healthz", 300, process):
        raise RuntimeError("the local model server did not become healthy; see its output above")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def main() -> int:
    load_dotenv()
    children_die_with_this_process()
    started = Started()
    children: list[tuple[str, subprocess.Popen]] = []
    stopping = False
    sock = None
    signalled = False  # a stop signal came, or the stop began: later ones only hurry it

    def on_signal(signum, frame):
        nonlocal signalled
        # The first Ctrl-C (SIGTERM: `kill`, `make` passing one on; SIGHUP: the terminal
        # closed) stops the run; a further one hurries the stop, which still stops everything.
        if signalled:
            if not started.hurry:
                started.hurry = True
                log("hurrying: killing what has not stopped yet")
            return
        signalled = True
        raise KeyboardInterrupt

    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)
    try:
        ensure_services(started)
        env = dict(os.environ, GROUNDWORK_LOCAL=os.environ.get("GROUNDWORK_LOCAL", "1"), PYTHONUNBUFFERED="1")
        port = int(env.get("PORT", "8000"))
        web_processes, worker_processes = process_count("WEB_PROCESSES"), process_count("WORKER_PROCESSES")
        sock = listening_socket("127.0.0.1", port)  # early: a taken port fails before anything starts
        # After the socket: a second run on a taken port must not empty the first one's folder.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir(env, f"run-{port}")  # mark_dead reads it
        # What is started again when it dies (watch): every child. The supervisor keeps the
        # listening socket open for a web process started again (it never accepts on it).
        respawn: dict = {}
        _start_model_server(env, children, respawn)
        _manage("migrate", "--no-input", "-v", "0", env=env)
        _manage("ensure_demo", env=env)
        cron_argv = [PYTHON, "manage.py", "rqcron", "config.cron"]
        for name, argv in [*((f"worker {i + 1}", worker_argv()) for i in range(worker_processes)), ("cron", cron_argv)]:
            children.append(spawn(name, argv, env))
            respawn[name] = functools.partial(_spawned, argv, env)
        for index in range(1, web_processes + 1):
            children.append((f"web {index}", spawn_web(sock, env, index)))
            respawn[f"web {index}"] = functools.partial(spawn_web, sock, env, index)
        web = children[-1][1]
        ready = _all_registered(
            [p for name, p in children if name.startswith("web ")],
            [p for name, p in children if name.startswith("worker ")],
            env,
        )
        if not _wait_http(f"http://127.0.0.1:{port}/healthz", 120, web, ready=ready):
            raise RuntimeError("the web servers or the workers did not come up; see the output above")
        log(f"{web_processes} web and {worker_processes} worker processes (WEB_PROCESSES, WORKER_PROCESSES)")
        log(f"Groundwork is running at http://127.0.0.1:{port}/  (Ctrl-C stops everything)")
        watch(children, respawn)
    except KeyboardInterrupt:
        stopping = True
        log("stopping…")
        return 0
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        log(f"error: {exc}")
        return 1
    finally:
        # From here on a signal only hurries the stop (on_signal): nothing cuts it short, and
        # log() never raises on a closed pipe or a hung-up terminal.
        signalled = True
        try:
            stop_children(children, hurry=lambda: started.hurry)
        finally:
            if sock is not None:
                sock.close()
            stop_services(started)
        if stopping:
            log("stopped")


if __name__ == "__main__":
    sys.exit(main())
