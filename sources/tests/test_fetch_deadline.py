"""A fetch's deadline holds however the server sends: a body (or headers) trickled a byte at
a time ends the fetch at SOURCES_FETCH_TIMEOUT_SECONDS with `fetch_failed`, and a sync of
such a source ends failed instead of holding its worker."""

import time

import pytest

from sources import net
from sources.errors import SourceError
from sources.tests.site import TricklingServer


@pytest.fixture
def allow_loopback(settings):
    settings.SOURCES_ALLOWED_HOSTS = ["127.0.0.1"]


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_trickling_server_is_cut_off_at_the_deadline(allow_loopback, headers_too):
    with TricklingServer(interval=0.5, declared=30, headers_too=headers_too) as slow:
        started = time.monotonic()
        with pytest.raises(SourceError) as error:
            net.fetch(slow.url("/page"), timeout=1.5)
        elapsed = time.monotonic() - started
    assert error.value.code == "fetch_failed"
    assert "took longer than 1.5 s" in error.value.message
    # The deadline (1.5 s) and a read's last wait past it, never the 30 bytes' 15 s.
    assert elapsed < 3.5, elapsed


def test_a_trickling_source_fails_its_sync_instead_of_holding_the_worker(
    allow_loopback, api_a, commit_and_run, settings
):
    settings.SOURCES_FETCH_TIMEOUT_SECONDS = 1.0
    with TricklingServer(interval=0.4, declared=30) as slow:
        started = time.monotonic()
        response = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": slow.url("/docs/")}))
        elapsed = time.monotonic() - started
    assert response.status_code == 201
    source = api_a.get(f"/api/v1/sources/{response.json()['id']}/").json()
    assert source["status"] == "failed" and source["document_count"] == 0
    assert "took longer than 1 s" in source["error"]
    # robots.txt and the start page, each cut off at its deadline.
    assert elapsed < 6, elapsed
