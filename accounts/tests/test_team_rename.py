"""Owners rename their team: the Team page and PATCH /api/v1/account/. Only ever the
session's (or key's) own account, only owners, names validated like sign-up's, audited."""

import json

import pytest
from django.test import Client

from accounts.models import Account, Role
from accounts.tests.factories import add_member, make_api_key
from audit.models import AuditEntry
from core.tenancy import account_context


def _name(account) -> str:
    return Account.objects.get(pk=account.pk).name


def _as(user) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


def test_an_owner_renames_the_team_and_the_header_shows_it(client_a, account_a, owner_a):
    assert 'id="team-name"' in client_a.get("/team/").content.decode()
    response = client_a.post("/team/rename/", {"name": "  Acme Research  "})
    assert response.status_code == 302 and response["Location"] == "/team/"
    assert _name(account_a) == "Acme Research"
    page = client_a.get("/").content.decode()
    assert 'class="account-name" title="Your team">Acme Research<' in page
    with account_context(account_a):
        [entry] = AuditEntry.objects.for_account(account_a).filter(action="account.rename")
    assert entry.detail == {"from": "Acme", "to": "Acme Research"} and entry.actor_id == owner_a.pk


def test_the_switcher_shows_the_new_name(account_a, account_b, owner_a):
    add_member(account_b, user=owner_a)
    browser = _as(owner_a)
    browser.post("/team/rename/", {"name": "Acme Labs"})
    assert ">Acme Labs</option>" in browser.get("/").content.decode()


@pytest.mark.parametrize("role", [Role.ADMIN, Role.MEMBER, Role.VIEWER])
def test_only_owners_rename(account_a, role):
    browser = _as(add_member(account_a, role=role))
    response = browser.post("/team/rename/", {"name": "Hijacked"})
    assert response.status_code == 403
    assert _name(account_a) == "Acme"
    if role == Role.ADMIN:  # admins see the Team page, without the rename form
        assert 'id="team-name"' not in browser.get("/team/").content.decode()


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("", "Give the team a name"),
        ("   ", "Give the team a name"),
        ("Acme\nBcc: x", "line breaks"),
        ("x" * 121, "at most 120"),
    ],
)
def test_a_bad_name_is_refused_with_its_reason(client_a, account_a, bad, reason):
    response = client_a.post("/team/rename/", {"name": bad})
    assert response.status_code == 400
    assert reason in response.content.decode()
    assert _name(account_a) == "Acme"


def test_a_posted_account_id_is_ignored(account_a, account_b, owner_a):
    """Owner of A, member of B: the rename is the session's account (A), whatever is posted."""
    add_member(account_b, user=owner_a, role=Role.MEMBER)
    browser = _as(owner_a)
    browser.post("/team/rename/", {"name": "Renamed", "account_id": account_b.pk, "account": account_b.pk})
    assert _name(account_a) == "Renamed" and _name(account_b) == "Beta"
    # Switched to B, where they are a member: refused.
    browser.post("/accounts/switch/", {"account_id": account_b.pk})
    assert browser.post("/team/rename/", {"name": "Mine now", "account_id": account_a.pk}).status_code == 403
    assert _name(account_a) == "Renamed" and _name(account_b) == "Beta"


def _patch(client, body, **headers):
    return client.patch("/api/v1/account/", data=json.dumps(body), content_type="application/json", **headers)


def test_the_api_renames_for_owners_sessions(client_a, account_a, account_b):
    response = _patch(client_a, {"name": "Acme API", "id": account_b.pk})
    assert response.status_code == 200, response.content
    assert response.json()["name"] == "Acme API" and response.json()["id"] == account_a.pk
    assert _name(account_a) == "Acme API" and _name(account_b) == "Beta"


def test_the_api_refuses_keys_admins_and_bad_names(client, account_a):
    key = make_api_key(account_a)
    refused = _patch(client, {"name": "By key"}, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    admin = _as(add_member(account_a, role=Role.ADMIN))
    assert _patch(admin, {"name": "By admin"}).status_code == 403
    owner = _as(account_a.test_owner)
    for body in ({}, {"name": 5}, {"name": ""}, {"name": "a\u202eb"}):
        bad = _patch(owner, body)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_name", body
    assert _name(account_a) == "Acme"
