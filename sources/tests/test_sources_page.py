"""The Sources page (Knowledge base tab): add, sync now, delete; statuses and the history of
each sync; what came from a site or a person is escaped; roles as for uploading."""

import pytest
from django.test import Client

from accounts.models import Role
from accounts.tests.factories import add_member
from core.tenancy import account_context
from sources.models import Source, SourceSync


@pytest.fixture
def owner_client(client, owner_a, fake_llm, queue):
    client.force_login(owner_a)
    return client


def test_the_tab_is_in_the_knowledge_base(owner_client):
    page = owner_client.get("/documents/").content.decode()
    assert 'href="/documents/sources/"' in page and ">Sources</a>" in page


def test_add_sync_and_delete_from_the_page(owner_client, handbook, commit_and_run, account_a):
    response = commit_and_run(
        lambda: owner_client.post(
            "/documents/sources/new/",
            {"kind": "web", "url": handbook.url("/docs/"), "max_pages": "10", "schedule": "hourly"},
        )
    )
    assert response.status_code == 302
    page = owner_client.get("/documents/sources/").content.decode()
    assert handbook.url("/docs/") in page and "4 documents" in page and "synced every hour" in page
    with account_context(account_a):
        source = Source.objects.for_account(account_a).get()
    assert source.max_pages == 10 and source.schedule == "hourly"
    commit_and_run(lambda: owner_client.post(f"/documents/sources/{source.pk}/sync/"))
    page = owner_client.get("/documents/sources/").content.decode()
    assert page.count("<td>Succeeded</td>") == 2
    commit_and_run(lambda: owner_client.post(f"/documents/sources/{source.pk}/delete/"))
    assert "No sources yet." in owner_client.get("/documents/sources/").content.decode()


def test_a_refused_address_is_shown_as_a_message(owner_client, settings):
    settings.SOURCES_ALLOWED_HOSTS = []
    response = owner_client.post("/documents/sources/new/", {"url": "http://169.254.169.254/"}, follow=True)
    assert "link-local address 169.254.169.254" in response.content.decode()


def test_errors_and_problems_are_escaped(owner_client, account_a):
    with account_context(account_a):
        source = Source.objects.for_account(account_a).create(
            account=account_a,
            kind="web",
            url="http://example.com/<b>x</b>",
            status="failed",
            error='<script>alert("error")</script>',
        )
        SourceSync.objects.for_account(account_a).create(
            account=account_a,
            source=source,
            status="failed",
            error="<img src=x onerror=alert(1)>",
            problems=["<iframe src=javascript:alert(2)>"],
        )
    page = owner_client.get("/documents/sources/").content.decode()
    assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;error&quot;)&lt;/script&gt;" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<iframe" not in page and "<b>x</b>" not in page


def test_a_viewer_sees_the_sources_but_may_not_add_sync_or_delete(
    client, account_a, owner_a, handbook, commit_and_run, queue, fake_llm
):
    client.force_login(owner_a)
    commit_and_run(lambda: client.post("/documents/sources/new/", {"url": handbook.url("/docs/")}))
    with account_context(account_a):
        source = Source.objects.for_account(account_a).get()
    viewer = add_member(account_a, role=Role.VIEWER)
    client.force_login(viewer)
    page = client.get("/documents/sources/").content.decode()
    assert handbook.url("/docs/") in page and "Add a source" not in page and "Sync now" not in page
    assert "Delete</button>" not in page
    assert client.post("/documents/sources/new/", {"url": handbook.url("/docs/")}).status_code == 403
    assert client.post(f"/documents/sources/{source.pk}/sync/").status_code == 403
    assert client.post(f"/documents/sources/{source.pk}/delete/").status_code == 403


def test_another_accounts_source_is_404_on_the_page(client, account_a, account_b, owner_b):
    with account_context(account_a):
        source = Source.objects.for_account(account_a).create(account=account_a, kind="web", url="http://a.example/")
    client.force_login(owner_b)
    assert "a.example" not in client.get("/documents/sources/").content.decode()
    assert client.post(f"/documents/sources/{source.pk}/sync/").status_code == 404
    assert client.post(f"/documents/sources/{source.pk}/delete/").status_code == 404


def test_posts_need_csrf(owner_a, handbook):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner_a)
    assert client.post("/documents/sources/new/", {"url": handbook.url("/docs/")}).status_code == 403
