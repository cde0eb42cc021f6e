"""pytest plugin (loaded with -p before pytest-django reads settings): makes the test run
as self-contained as `make run`. Starts the embedded PostgreSQL / Redis where
DATABASE_URL / REDIS_URL are unset, and stops what it started when the run ends."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from config.embedded import DATA_DIR, Started, ensure_services, load_dotenv, stop_services

_started: Started | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    global _started
    load_dotenv()
    os.environ["GROUNDWORK_TESTING"] = "1"
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1"... under pytest-xdist (-n)
    if worker is None:  # the run itself (or its xdist controller): services and the run's Redis database
        redis_configured = bool(os.environ.get("REDIS_URL"))
        _started = ensure_services()
        if not redis_configured:
            # Tests get their own Redis database, away from a `make run` on the same Redis.
            os.environ["REDIS_URL"] = redis_database(os.environ["REDIS_URL"], 15)
        # The run's migrated data folder, made by the first test that needs an installation of
        # its own (config/testing.py migrated_data_folder) and removed when the run ends.
        template = tempfile.mkdtemp(prefix="gw-template-")
        os.chmod(template, 0o755)
        os.environ["GROUNDWORK_TEST_TEMPLATE"] = template
    else:
        # An xdist worker inherits the controller's services and takes a Redis database of its own
        # (the run's, minus its number), so queues, rq registries, rate-limit counts, the cache and
        # the channel layer never meet another worker's; pytest-django gives it its own test
        # database (test_<name>_gwN) and MEDIA_ROOT is its own folder.
        os.environ["REDIS_URL"] = redis_database(os.environ["REDIS_URL"], -worker_number(worker), relative=True)
    for prefix in ("CHANNELS_PREFIX", "CACHE_PREFIX"):
        os.environ.setdefault(prefix, "groundwork-test")  # set by the run; a worker adds its name
        if worker:
            os.environ[prefix] += f"-{worker}"
    # Uploaded files of the tests live apart from `make run`'s, and each worker's apart.
    os.environ.setdefault("MEDIA_ROOT", str(DATA_DIR / "test-media"))
    if worker:
        os.environ["MEDIA_ROOT"] = os.path.join(os.environ["MEDIA_ROOT"], worker)
    # Tests' new accounts start with a small, fixed balance, whatever the product's default
    # (docs/guide/credits.md): their expected balances and "needs about N credits" messages name it.
    os.environ.setdefault("SIGNUP_CREDITS", "10000")
    # Tests keep the fast bundled chat model (SmolLM2-135M) wherever they start the local model
    # server; a test that needs Qwen asks for it and is marked slow (llm/tests).
    os.environ.setdefault("LOCAL_CHAT_MODEL", "smollm2-135m")
    # Tests embed with MiniLM unless they name a model (the e5 tests do): ~4x faster on the
    # bundled server, and the fake server's token counts stay those the tests were written for.
    os.environ.setdefault("EMBEDDING_MODEL", "all-minilm-l6-v2")
    # Race tests run 16+ threads that each hold a connection until they finish; a web
    # process's threads give theirs back after every request (settings, the pool).
    os.environ.setdefault("DATABASE_POOL_MAX_SIZE", "32")


def worker_number(worker: str | None) -> int:
    """0 for "gw0" (and for a run without workers), 1 for "gw1", ..."""
    return int(worker[2:]) if worker and worker.startswith("gw") and worker[2:].isdigit() else 0


def redis_database(url: str, number: int, relative: bool = False) -> str:
    """`url` with another database: `number`, or (relative) its own plus `number`, modulo the 16
    databases a Redis server has. Both spellings: redis://host:port/N and unix://path?db=N."""
    if url.startswith(("redis://", "rediss://")):
        head, _, tail = url.rpartition("/")
        current = int(tail) if tail.isdigit() else 0
        head = head if tail.isdigit() or tail == "" else url.rstrip("/")
    else:
        base, _, query = url.partition("?")
        params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        current = int(params.get("db", 0))
    database = (current + number) % 16 if relative else number
    if url.startswith(("redis://", "rediss://")):
        return f"{head}/{database}"
    params["db"] = str(database)
    return base + "?" + "&".join(f"{key}={value}" for key, value in params.items())


def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        return
    if os.environ.get("GROUNDWORK_TEST_TEMPLATE"):
        shutil.rmtree(os.environ["GROUNDWORK_TEST_TEMPLATE"], ignore_errors=True)
    if _started is not None:
        stop_services(_started)


def pytest_xdist_make_scheduler(config, log):
    """`-n N`: the suite's own scheduling over the workers (config/test_scheduling.py)."""
    from config.test_scheduling import CostScheduling

    return CostScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Every browser test starts processes (daphne, an rq worker, chromium): `system`, as the
    modules that start their own declare themselves."""
    for item in items:
        if item.nodeid.startswith("e2e/"):
            item.add_marker(pytest.mark.system)
