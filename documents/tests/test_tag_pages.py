"""The Knowledge base's tags: shown on each document (escaped), edited by
a small form (a member only on their own documents), a filter by tag, tags on upload, the
account's excluded tags (owners and admins) and "Excluded from answers". Real database;
the browser test is e2e/test_tags_page.py."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts.models import Role
from accounts.tests.factories import add_member
from core.tenancy import account_context
from documents.models import Document
from documents.services import document_upload
from documents.tags import retrieval_exclude_tags, retrieval_exclude_tags_set

EVIL = '<img src=x onerror="alert(1)">'


def _doc(account, name, *, actor=None, tags=()):
    with account_context(account):
        document, _ = document_upload(
            account=account,
            actor=actor,
            tags=list(tags),
            upload=SimpleUploadedFile(name, f"Text of {name}.\n".encode(), "text/plain"),
        )
    return document


def _tags(account, document):
    with account_context(account):
        return Document.objects.for_account(account).get(pk=document.pk).tags


@pytest.fixture
def owner_client(client, account_a, fake_llm):
    client.force_login(account_a.test_owner)
    return client


def test_tags_are_shown_escaped_with_their_filter_and_the_excluded_badge(owner_client, account_a):
    _doc(account_a, "policy.txt", tags=["HR", EVIL])
    _doc(account_a, "draft.txt", tags=["draft"])
    with account_context(account_a):
        retrieval_exclude_tags_set(account=account_a, actor=None, exclude_tags=["Draft"])
    html = owner_client.get("/documents/").content.decode()
    assert EVIL not in html and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert html.count("Excluded from answers</span>") == 1
    assert 'href="?tag=HR"' in html
    filtered = owner_client.get("/documents/?tag=HR").content.decode()
    assert "policy.txt" in filtered and "draft.txt" not in filtered
    assert 'name="exclude_tags" value="Draft"' in html  # the owner's settings form


def test_the_tags_form_replaces_a_documents_tags(owner_client, account_a):
    document = _doc(account_a, "policy.txt", tags=["old"])
    response = owner_client.post(f"/documents/{document.pk}/tags/", {"tags": "policy, HR, hr", "next": "/documents/"})
    assert response.status_code == 302 and response["Location"] == "/documents/"
    assert _tags(account_a, document) == ["policy", "HR"]
    response = owner_client.post(f"/documents/{document.pk}/tags/", {"tags": "x" * 41}, follow=True)
    assert "at most 40 characters" in response.content.decode()
    assert _tags(account_a, document) == ["policy", "HR"]
    detail = owner_client.get(f"/documents/{document.pk}/").content.decode()
    assert 'value="policy, HR"' in detail


def test_a_member_tags_only_their_own_documents_and_a_viewer_none(client, account_a, fake_llm):
    member = add_member(account_a, role=Role.MEMBER)
    viewer = add_member(account_a, role=Role.VIEWER)
    theirs = _doc(account_a, "theirs.txt", actor=member)
    owners = _doc(account_a, "owners.txt", actor=account_a.test_owner)
    client.force_login(member)
    html = client.get("/documents/").content.decode()
    assert f'action="/documents/{theirs.pk}/tags/"' in html and f'action="/documents/{owners.pk}/tags/"' not in html
    assert client.post(f"/documents/{owners.pk}/tags/", {"tags": "x"}).status_code == 403
    assert client.post(f"/documents/{theirs.pk}/tags/", {"tags": "x"}).status_code == 302
    assert _tags(account_a, owners) == [] and _tags(account_a, theirs) == ["x"]
    client.force_login(viewer)
    assert "/tags/" not in client.get("/documents/").content.decode()
    assert client.post(f"/documents/{theirs.pk}/tags/", {"tags": "y"}).status_code == 403


def test_another_accounts_document_is_404(client, account_a, account_b, fake_llm):
    document = _doc(account_a, "a.txt", tags=["mine"])
    client.force_login(account_b.test_owner)
    assert client.post(f"/documents/{document.pk}/tags/", {"tags": "stolen"}).status_code == 404
    assert _tags(account_a, document) == ["mine"]


def test_excluded_tags_form_for_owners_and_admins_only(client, account_a, account_b, fake_llm):
    client.force_login(account_a.test_owner)
    response = client.post("/documents/exclude-tags/", {"exclude_tags": "confidential, Draft"})
    assert response.status_code == 302
    with account_context(account_a):
        assert retrieval_exclude_tags(account=account_a) == ["confidential", "Draft"]
    with account_context(account_b):
        assert retrieval_exclude_tags(account=account_b) == []
    member = add_member(account_a, role=Role.MEMBER)
    client.force_login(member)
    html = client.get("/documents/").content.decode()
    assert 'name="exclude_tags"' not in html and "confidential" in html  # shown, not editable
    assert client.post("/documents/exclude-tags/", {"exclude_tags": ""}).status_code == 403
    client.force_login(add_member(account_a, role=Role.ADMIN))
    assert client.post("/documents/exclude-tags/", {"exclude_tags": ""}).status_code == 302
    with account_context(account_a):
        assert retrieval_exclude_tags(account=account_a) == []


def test_the_upload_form_takes_tags(owner_client, account_a):
    response = owner_client.post(
        "/documents/upload/",
        {"file": SimpleUploadedFile("u.txt", b"Uploaded text.\n"), "tags": "policy, 2026"},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 202, response.content
    assert response.json()["document"]["tags"] == ["policy", "2026"]
    response = owner_client.post(
        "/documents/upload/",
        {"file": SimpleUploadedFile("v.txt", b"Other text.\n"), "tags": "a\u0007b"},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_tags"
