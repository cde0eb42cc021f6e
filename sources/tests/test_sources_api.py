"""The sources API: validation answers 400 naming the field; another account's source is
404 on every endpoint; a read key and a viewer may not add, sync or delete; DELETE takes the
source's documents with it (by a job)."""

import pytest

from accounts.models import Role
from accounts.tests.factories import add_member
from core.tenancy import account_context
from documents.models import Document
from sources.models import Source, SourceItem, SourceSync
from sources.tests.site import page


@pytest.fixture
def source_a(api_a, handbook, commit_and_run):
    response = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": handbook.url("/docs/")}))
    assert response.status_code == 201
    return response.json()


@pytest.mark.parametrize(
    "body, code, field_word",
    [
        ({"kind": "ftp", "url": "http://example.com/"}, "invalid_kind", "kind"),
        ({"url": "http://example.com/"}, "invalid_kind", "kind"),
        ({"kind": "web"}, "invalid_url", "url"),
        ({"kind": "web", "url": 5}, "invalid_url", "url"),
        ({"kind": "web", "url": "http://example.com/", "max_pages": 0}, "invalid_max_pages", "max_pages"),
        ({"kind": "web", "url": "http://example.com/", "max_pages": 100000}, "invalid_max_pages", "max_pages"),
        ({"kind": "web", "url": "http://example.com/", "max_pages": "ten"}, "invalid_max_pages", "max_pages"),
        ({"kind": "web", "url": "http://example.com/", "max_pages": True}, "invalid_max_pages", "max_pages"),
        ({"kind": "web", "url": "http://example.com/", "schedule": "weekly"}, "invalid_schedule", "schedule"),
        ({"kind": "web", "url": "http://example.com/", "options": []}, "invalid_option", "options"),
        ({"kind": "web", "url": "http://example.com/", "tags": ["x" * 41]}, "invalid_tags", "tag"),
        ({"kind": "web", "url": "http://example.com/", "tags": "policy"}, "invalid_tags", "tags"),
    ],
)
def test_bad_input_is_a_specific_400(api_a, body, code, field_word):
    response = api_a.post("/api/v1/sources/", body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == code and field_word in error["message"]


def test_a_body_that_is_not_an_object_is_400(api_a):
    response = api_a.client.post("/api/v1/sources/", "[1, 2]", content_type="application/json", **api_a.headers)
    assert response.status_code == 400 and response.json()["error"]["code"] == "bad_request"


def test_list_and_detail(api_a, source_a, handbook):
    listed = api_a.get("/api/v1/sources/").json()
    assert [s["id"] for s in listed["results"]] == [source_a["id"]] and "next" in listed
    item = listed["results"][0]
    assert item["status"] == "idle" and item["document_count"] == 4 and item["schedule"] is None
    assert item["last_sync"] == {"added": 4, "updated": 0, "removed": 0, "unchanged": 0}
    detail = api_a.get(f"/api/v1/sources/{source_a['id']}/").json()
    assert detail["syncs"][0]["trigger"] == "create" and detail["syncs"][0]["status"] == "succeeded"


def test_a_schedule_is_kept_and_answered(api_a, handbook, commit_and_run):
    response = commit_and_run(
        lambda: api_a.post(
            "/api/v1/sources/", {"kind": "web", "url": handbook.url("/docs/"), "schedule": "daily", "max_pages": 3}
        )
    )
    body = api_a.get(f"/api/v1/sources/{response.json()['id']}/").json()
    assert body["schedule"] == "daily" and body["max_pages"] == 3 and body["next_sync_at"]


def test_another_accounts_source_is_404_everywhere(api_a, api_b, source_a, account_a):
    sid = source_a["id"]
    for call in (
        lambda: api_b.get(f"/api/v1/sources/{sid}/"),
        lambda: api_b.post(f"/api/v1/sources/{sid}/sync/"),
        lambda: api_b.delete(f"/api/v1/sources/{sid}/"),
    ):
        response = call()
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert api_b.get("/api/v1/sources/").json()["results"] == []
    assert api_a.get(f"/api/v1/sources/{sid}/").status_code == 200
    for missing in ("999999", "99999999999999999999"):
        assert api_a.get(f"/api/v1/sources/{missing}/").status_code == 404


def test_a_read_key_may_list_but_not_add_sync_or_delete(read_api_a, source_a, handbook):
    assert read_api_a.get("/api/v1/sources/").status_code == 200
    assert read_api_a.get(f"/api/v1/sources/{source_a['id']}/").status_code == 200
    for response in (
        read_api_a.post("/api/v1/sources/", {"kind": "web", "url": handbook.url("/docs/")}),
        read_api_a.post(f"/api/v1/sources/{source_a['id']}/sync/"),
        read_api_a.delete(f"/api/v1/sources/{source_a['id']}/"),
    ):
        assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
        assert "read-only" in response.json()["error"]["message"]


def test_a_viewer_may_not_add_and_a_member_deletes_only_their_own(client, account_a, source_a, handbook, queue):
    viewer = add_member(account_a, role=Role.VIEWER)
    client.force_login(viewer)
    assert (
        client.post(
            "/api/v1/sources/", {"kind": "web", "url": handbook.url("/docs/")}, content_type="application/json"
        ).status_code
        == 403
    )
    member = add_member(account_a, role=Role.MEMBER)
    client.force_login(member)
    assert client.delete(f"/api/v1/sources/{source_a['id']}/").status_code == 403
    created = client.post(
        "/api/v1/sources/", {"kind": "web", "url": handbook.url("/docs/leave")}, content_type="application/json"
    )
    assert created.status_code == 201
    assert client.delete(f"/api/v1/sources/{created.json()['id']}/").status_code == 202


def test_sync_while_syncing_returns_the_running_sync(api_a, source_a, account_a, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = api_a.post(f"/api/v1/sources/{source_a['id']}/sync/")
        second = api_a.post(f"/api/v1/sources/{source_a['id']}/sync/")
    assert first.status_code == second.status_code == 202
    assert first.json()["status"] == second.json()["status"] == "syncing"
    with account_context(account_a):
        assert SourceSync.objects.for_account(account_a).filter(status="running").count() == 1


def test_delete_removes_the_source_and_its_documents(api_a, source_a, account_a, commit_and_run):
    response = commit_and_run(lambda: api_a.delete(f"/api/v1/sources/{source_a['id']}/"))
    assert response.status_code == 202
    assert api_a.get(f"/api/v1/sources/{source_a['id']}/").status_code == 404
    assert api_a.get("/api/v1/sources/").json()["results"] == []
    with account_context(account_a):
        assert not Document.objects.for_account(account_a).visible().exists()
        assert not Source.objects.for_account(account_a).exists()
        assert not SourceItem.objects.for_account(account_a).exists()
    assert api_a.get("/api/v1/documents/").json()["results"] == []


def test_a_document_two_sources_share_goes_with_the_last_of_them(api_a, site, account_a, commit_and_run):
    site.set("/p/", page("Policy", "The same policy text, read by two sources."))
    created = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": site.url("/p/")}))
    second = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": site.url("/p/")}))
    with account_context(account_a):
        docs = list(Document.objects.for_account(account_a).visible())
    assert len(docs) == 1  # the same text twice is one document
    commit_and_run(lambda: api_a.delete(f"/api/v1/sources/{created.json()['id']}/"))
    with account_context(account_a):
        assert Document.objects.for_account(account_a).visible().count() == 1  # the other source still has it
    commit_and_run(lambda: api_a.delete(f"/api/v1/sources/{second.json()['id']}/"))
    with account_context(account_a):
        assert not Document.objects.for_account(account_a).visible().exists()


def test_unauthenticated_is_401(client):
    assert client.get("/api/v1/sources/").status_code == 401


def test_a_deleted_accounts_sources_go_with_it(api_a, source_a, account_a, owner_a):
    from accounts.services.deletion import account_delete
    from core.tenancy import dangerously_bypass_tenancy

    with account_context(account_a):
        account_delete(account=account_a, actor=owner_a)
    with dangerously_bypass_tenancy(reason="test: nothing of the account's sources is left"):
        assert not Source.all_accounts.filter(account_id=account_a.pk).exists()
        assert not SourceSync.all_accounts.filter(account_id=account_a.pk).exists()
