"""Shared set-up for benchmarks: a database of their own (`<name>_bench`, or BENCH_DATABASE),
migrated, on the same server as the app (the embedded one by default), so runs never touch
real data. (A second name keeps an older checkout's run apart from a migrated one.)"""

from __future__ import annotations

import os
import platform
import statistics
import time


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("GROUNDWORK_TESTING", "1")
    from config.embedded import ensure_services, load_dotenv

    load_dotenv()
    redis_configured = bool(os.environ.get("REDIS_URL"))
    ensure_services()
    if not redis_configured:
        # Benchmarks get their own Redis database, away from a `make run` of this checkout:
        # its queue, channel layer and web-process count (the tests use db 15).
        url = os.environ["REDIS_URL"]
        os.environ["REDIS_URL"] = url.replace("db=0", "db=14") if "db=0" in url else url.rsplit("/", 1)[0] + "/14"
    os.environ.setdefault("CHANNELS_PREFIX", "groundwork-bench")
    os.environ.setdefault("CACHE_PREFIX", "groundwork-bench")
    import environ
    import psycopg

    url = os.environ["DATABASE_URL"]
    # The schema's owner makes and migrates the database (core/db_owner.py), as in production.
    config = environ.Env.db_url_config(os.environ.get("DATABASE_OWNER_URL") or url)
    bench_db = os.environ.get("BENCH_DATABASE") or f"{config['NAME']}_bench"
    from urllib.parse import unquote

    conninfo = dict(
        dbname=config["NAME"],
        user=config["USER"],
        host=unquote(config["HOST"]),
        port=config["PORT"] or None,
        password=config["PASSWORD"] or None,
    )
    with psycopg.connect(**{k: v for k, v in conninfo.items() if v}, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [bench_db]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{bench_db}"')
    os.environ["DATABASE_URL"] = url.rsplit("/", 1)[0] + "/" + bench_db
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - started, result


__all__ = ["setup_django", "machine", "percentile", "timed", "statistics"]
