"""Provisioning in a browser, against daphne: an invited person signs up from the link (the form
filled in with their address) and has exactly one team; an owner makes a SCIM token on the
Team page, and an identity provider's deactivation over HTTP closes the person's open chat."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request

import pytest
from django.core import mail
from playwright.sync_api import expect

from accounts import services
from accounts.models import Membership, Role, User
from accounts.selectors import membership_list_for_user
from accounts.tests.factories import PASSWORD, add_member, make_account, make_user
from core.tenancy import account_context
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_invited_person_signs_up_prefilled_and_has_only_the_inviting_team(new_page, stack):
    account = make_account("Invitech", owner_email="owner@invitech.test")
    mail.outbox.clear()
    with account_context(account):
        services.member_invite(
            account=account,
            actor=account.test_owner,
            email="new.hire@invitech.test",
            role=Role.MEMBER,
            site_url=stack.base_url,
        )
    [message] = [m for m in mail.outbox if "new.hire@invitech.test" in m.to]
    link = re.search(r"https?://\S+/invitations/\S+/", message.body).group(0)

    page = new_page()
    page.goto(link)
    expect(page.get_by_role("heading", name="Join Invitech")).to_be_visible()
    page.locator("main").get_by_role("link", name="sign up").click()
    email = page.get_by_label("Work email")
    expect(email).to_have_value("new.hire@invitech.test")
    expect(email).not_to_be_editable()
    expect(page.get_by_label("Team name")).to_have_count(0)
    page.get_by_label("Your name").fill("New Hire")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign up and join Invitech").click()

    expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    expect(page.get_by_text("You joined Invitech as member")).to_be_visible()
    expect(page.locator(".account .account-name")).to_have_text("Invitech")
    expect(page.locator("#account-switch")).to_have_count(0)  # one team: no switcher
    user = User.objects.get(email="new.hire@invitech.test")
    assert [m.account_id for m in membership_list_for_user(user=user)] == [account.pk]


def _scim(stack, method: str, path: str, token: str, body=None):
    request = urllib.request.Request(
        stack.url(f"/scim/v2{path}"),
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/scim+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"] == "application/scim+json"
        return json.loads(response.read() or b"null")


def test_scim_deactivation_over_http_closes_the_persons_open_chat(new_page, stack):
    account = make_account("Provisioned", owner_email="owner@provisioned.test")
    other = make_account("Elsewhere", owner_email="owner@elsewhere.test")
    person = add_member(account, make_user("pat@provisioned.test"), role=Role.ADMIN)
    add_member(other, person)

    owner = new_page()
    log_in(owner, "owner@provisioned.test")
    owner.goto("/team/")
    owner.get_by_role("button", name="Create SCIM token").click()
    token = owner.locator("#new-scim-token").inner_text().strip()
    assert token.startswith("gwscim_")
    expect(owner.locator("#scim-tokens-table")).to_contain_text(token[:12])

    chat = new_page()
    log_in(chat, "pat@provisioned.test")
    chat.goto("/chat/")
    if chat.locator("#account-switch").count():
        chat.locator("#account-switch").select_option(label="Provisioned")
        chat.get_by_role("button", name="Switch").click()
        chat.goto("/chat/")
    expect(chat.locator("#connection")).to_have_text("Connected")

    query = urllib.parse.urlencode({"filter": 'userName eq "Pat@Provisioned.test"'})
    found = _scim(stack, "GET", f"/Users?{query}", token)
    assert found["totalResults"] == 1
    scim_id = found["Resources"][0]["id"]
    # Entra ID's deactivation.
    answer = _scim(
        stack,
        "PATCH",
        f"/Users/{scim_id}",
        token,
        {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{"op": "Replace", "path": "active", "value": "False"}],
        },
    )
    assert answer["active"] is False

    expect(chat.locator("#connection")).to_have_text("Signed out")
    with account_context(account):
        assert not Membership.objects.for_account(account).filter(user=person).exists()
    # Their session carries on in their other team only.
    chat.goto("/")
    expect(chat.locator(".account .account-name")).to_have_text("Elsewhere")

    # Okta's reactivation gives the role back.
    _scim(
        stack,
        "PATCH",
        f"/Users/{scim_id}",
        token,
        {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{"op": "replace", "value": {"active": True}}],
        },
    )
    with account_context(account):
        assert Membership.objects.for_account(account).get(user=person).role == Role.ADMIN
