"""The personal export and "Members must sign in with SSO" (accounts/sso/): a team that requires
single sign-on is left out of the export a password session asks for, and the export and its
page say so; a session signed in through the provider (a real one on loopback) gets it whole;
a password session cannot download an export that holds such a team."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from accounts.models import Account, Role
from accounts.tests.factories import add_member, make_user
from accounts.tests.oidc_provider import sso_provider as provider  # noqa: F401 (a fixture)
from accounts.tests.oidc_provider import sso_sign_in
from chat.models import Conversation, Message
from core.tenancy import account_context
from documents.services import document_upload
from exports.tests.test_exports import _all_text, _export, _zip

pytestmark = pytest.mark.django_db

# (test_exports' autouse fixture runs each request's on-commit work, as after its commit)
from exports.tests.test_exports import _commit_hooks  # noqa: E402,F401


@pytest.fixture
def sso_team(account_a, fake_llm, run_jobs, django_capture_on_commit_callbacks):
    """Acme requires SSO; its member uploaded a document and asked a question there."""
    member = add_member(account_a, make_user("member@acme.test"), role=Role.MEMBER)
    with account_context(account_a, user=member), django_capture_on_commit_callbacks(execute=True):
        document_upload(
            account=account_a,
            actor=member,
            upload=SimpleUploadedFile("acme-secrets.txt", b"ACMEMARKER the board's plans.", content_type="text/plain"),
        )
    run_jobs()
    with account_context(account_a):
        conversation = Conversation.objects.for_account(account_a).create(
            account=account_a, user=member, title="ACMECHAT title"
        )
        Message.objects.for_account(account_a).create(
            account=account_a, conversation=conversation, role="user", content="ACMECHAT question"
        )
    Account.objects.filter(pk=account_a.pk).update(sso_required=True)
    return member


def _password_session_with_a_team_of_its_own(member) -> Client:
    client = Client()
    client.force_login(member)
    assert client.get("/").status_code == 403  # Acme's pages: sign in with SSO
    assert client.post("/accounts/new/", {"name": "My side team"}).status_code == 302  # still open
    assert client.get("/").status_code == 200
    return client


def test_a_password_session_exports_without_the_team_that_requires_sso(sso_team, account_a, run_jobs):
    client = _password_session_with_a_team_of_its_own(sso_team)
    body = _export(client, run_jobs)
    assert body["status"] == "ready" and body["download_url"]
    assert body["left_out"] == [{"id": account_a.pk, "name": "Acme", "reason": "sso_required"}]
    archive = _zip(client, body["download_url"])
    text = _all_text(archive)
    assert "ACMEMARKER" not in text and "ACMECHAT" not in text
    assert not [name for name in archive.namelist() if name.startswith(f"accounts/{account_a.pk}-")]
    manifest = json.loads(archive.read("export.json"))
    assert [a["name"] for a in manifest["accounts"]] == ["My side team"]
    assert manifest["left_out"] == [
        {
            "id": account_a.pk,
            "name": "Acme",
            "reason": "sso_required",
            "message": "Acme requires single sign-on: sign in with SSO, then request a new export to include it.",
        }
    ]
    page = client.get("/").content.decode()
    assert "Left out: Acme" in page and "sign in with SSO" in page


def test_a_session_signed_in_with_sso_exports_that_team_and_a_password_session_cannot_download_it(
    provider, sso_team, account_a, run_jobs
):
    client = sso_sign_in(Client(), provider, sso_team)
    assert client.get("/").status_code == 200
    body = _export(client, run_jobs)
    assert body["left_out"] == []
    assert "ACMEMARKER" in _all_text(_zip(client, body["download_url"]))

    password = Client()
    password.force_login(sso_team)
    assert password.post("/accounts/new/", {"name": "My side team"}).status_code == 302
    refused = password.get(body["download_url"])
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"]["code"] == "sso_required" and "Acme" in refused.json()["error"]["message"]


def test_the_page_says_before_asking_which_teams_an_export_would_leave_out(sso_team):
    client = _password_session_with_a_team_of_its_own(sso_team)
    page = client.get("/").content.decode()
    assert "Acme requires single sign-on: an export you request now leaves it out." in page
