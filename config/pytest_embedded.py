"""pytest plugin (loaded with -p before pytest-django reads settings): makes the test run
as self-contained as `make run`. Starts the embedded PostgreSQL / Redis where
DATABASE_URL / REDIS_URL are unset, and stops what it started when the run ends."""
from __future__ import annotations

import os

import pytest

from config.embedded import Started, ensure_services, load_dotenv, stop_services

_started: Started | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    global _started
    load_dotenv()
    os.environ["GROUNDWORK_TESTING"] = "1"
    redis_configured = bool(os.environ.get("REDIS_URL"))
    _started = ensure_services()
    if not redis_configured:
        # Tests get their own Redis database, away from a `make run` on the same Redis.
        url = os.environ["REDIS_URL"]
        os.environ["REDIS_URL"] = url.rsplit("/", 1)[0] + "/15" if url.startswith("redis://") else url.replace("db=0", "db=15")
    os.environ.setdefault("CHANNELS_PREFIX", "groundwork-test")
    # Tests' new accounts start with a small, fixed balance, whatever the product's default
    # (docs/guide/credits.md): their expected balances and "needs about N credits" messages name it.
    os.environ.setdefault("SIGNUP_CREDITS", "10000")
    os.environ.setdefault("CACHE_PREFIX", "groundwork-test")
    # Tests keep the fast bundled chat model (SmolLM2-135M) wherever they start the local model
    # server; a test that needs Qwen asks for it and is marked slow (llm/tests).
    os.environ.setdefault("LOCAL_CHAT_MODEL", "smollm2-135m")
    # Tests embed with MiniLM unless they name a model (the e5 tests do): ~4x faster on the
    # bundled server, and the fake server's token counts stay those the tests were written for.
    os.environ.setdefault("EMBEDDING_MODEL", "all-minilm-l6-v2")
    # Race tests run 16+ threads that each hold a connection until they finish; a web
    # process's threads give theirs back after every request (settings, the pool).
    os.environ.setdefault("DATABASE_POOL_MAX_SIZE", "32")


def pytest_unconfigure(config):
    if _started is not None and not hasattr(config, "workerinput"):
        stop_services(_started)
