"""Fixtures for the sources' tests: a site on loopback (allowed through
SOURCES_ALLOWED_HOSTS, as an intranet would be), an API client per account and key."""

import pytest

from accounts.models import KeyScope
from accounts.services.api_keys import api_key_create
from core.tenancy import account_context
from sources.tests.site import LoopbackSite, page


@pytest.fixture
def site(settings):
    settings.SOURCES_ALLOWED_HOSTS = ["127.0.0.1"]
    with LoopbackSite() as served:
        yield served


@pytest.fixture
def handbook(site):
    """/docs/: an index linking three pages, one link to another host, one outside /docs/."""
    site.set(
        "/docs/",
        page(
            "Handbook",
            "The staff handbook.",
            ["/docs/leave", "/docs/expenses", "/docs/security", "http://elsewhere.invalid/docs/x", "/blog/news"],
        ),
    )
    site.set("/docs/leave", page("Leave", "Everyone has twenty-eight days of paid holiday a year."))
    site.set("/docs/expenses", page("Expenses", "Claims need receipts and a manager's approval."))
    site.set("/docs/security", page("Security", "Laptops lock after five minutes without use."))
    site.set("/blog/news", page("News", "Not part of the handbook."))
    return site


def _key(account, scope):
    with account_context(account):
        _, raw = api_key_create(account=account, actor=None, name=f"{scope} key", scope=scope)
    return raw


class Api:
    def __init__(self, client, key):
        self.client, self.headers = client, {"HTTP_AUTHORIZATION": f"Bearer {key}"}

    def get(self, path):
        return self.client.get(path, **self.headers)

    def post(self, path, body=None):
        return self.client.post(path, body or {}, content_type="application/json", **self.headers)

    def delete(self, path):
        return self.client.delete(path, **self.headers)


@pytest.fixture
def api_a(client, account_a, fake_llm, queue):
    return Api(client, _key(account_a, KeyScope.WRITE))


@pytest.fixture
def api_b(client, account_b):
    return Api(client, _key(account_b, KeyScope.WRITE))


@pytest.fixture
def read_api_a(client, account_a):
    return Api(client, _key(account_a, KeyScope.READ))


@pytest.fixture
def commit_and_run(django_capture_on_commit_callbacks, run_jobs):
    """Run a call, fire its on-commit hooks (enqueueing), then every queued job."""

    def go(call):
        with django_capture_on_commit_callbacks(execute=True):
            result = call()
        run_jobs()
        return result

    return go
