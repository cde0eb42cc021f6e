"""Verified domains (the Team page, owners): a link emailed to admin@ or postmaster@ of the
domain verifies it for one account; then that account's SCIM token adds existing users with
an address there at once. Other accounts, roles and forged links get nothing."""

from __future__ import annotations

import re

import pytest
from django.core import mail, signing
from django.test import Client

from accounts.domains.models import VerifiedDomain
from accounts.models import Role
from accounts.tests.factories import add_member, make_user
from accounts.tests.test_scim import Scim, assert_error, make_token, membership, okta_user
from audit.models import AuditEntry
from core.tenancy import account_context

pytestmark = pytest.mark.django_db

LINK = re.compile(r"http://testserver(/domains/verify/[^\s/]+/)")


def _team(user) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


def _ask(browser, capture, domain="beta.test", mailbox="postmaster"):
    mail.outbox.clear()
    with capture(execute=True):
        response = browser.post("/team/domains/", {"domain": domain, "mailbox": mailbox})
    assert response.status_code == 302
    return response


def _domains(account):
    with account_context(account):
        return list(VerifiedDomain.objects.for_account(account).values_list("domain", "verified_at"))


def test_an_owner_verifies_a_domain_and_its_existing_users_join_at_once(
    client, account_a, owner_a, account_b, owner_b, django_capture_on_commit_callbacks
):
    team = _team(owner_a)
    _ask(team, django_capture_on_commit_callbacks, domain=" Beta.TEST ")
    [sent] = mail.outbox
    assert sent.to == ["postmaster@beta.test"]
    link = LINK.search(sent.body).group(1)
    page = team.get("/team/").content.decode().split('id="verified-domains"', 1)[1]
    assert "beta.test" in page and "waiting" in page
    # Whoever reads that mailbox opens the link (no login) and presses Verify.
    reader = Client()
    assert "Verify beta.test" in reader.get(link).content.decode()
    assert _domains(account_a)[0][1] is None  # a GET (a mail scanner) verifies nothing
    assert reader.post(link).status_code == 200
    assert _domains(account_a)[0][1] is not None
    assert reader.post(link).status_code == 404  # once
    # A's token now adds Beta's owner at once; their own team stays theirs.
    scim = Scim(client, make_token(client, account_a))
    assert scim.post("/Users", okta_user("owner@beta.test")).status_code == 201
    assert membership(account_a, owner_b).role == Role.MEMBER and membership(account_b, owner_b).role == Role.OWNER
    with account_context(account_a):
        actions = list(
            AuditEntry.objects.for_account(account_a)
            .filter(target="beta.test")
            .order_by("id")
            .values_list("action", flat=True)
        )
    assert actions == ["domain.verification_sent", "domain.verify"]


def test_a_removed_domain_invites_again(client, account_a, owner_a, account_b, django_capture_on_commit_callbacks):
    team = _team(owner_a)
    _ask(team, django_capture_on_commit_callbacks)
    Client().post(LINK.search(mail.outbox[0].body).group(1))
    with account_context(account_a):
        row = VerifiedDomain.objects.for_account(account_a).get()
    assert team.post(f"/team/domains/{row.pk}/remove/").status_code == 302
    assert _domains(account_a) == []
    scim = Scim(client, make_token(client, account_a))
    assert_error(scim.post("/Users", okta_user("owner@beta.test")), 409, "uniqueness")


@pytest.mark.parametrize("role", [Role.ADMIN, Role.MEMBER, Role.VIEWER])
def test_only_owners_manage_domains(account_a, role, django_capture_on_commit_callbacks):
    person = add_member(account_a, role=role)
    browser = _team(person)
    with django_capture_on_commit_callbacks(execute=True):
        assert browser.post("/team/domains/", {"domain": "beta.test", "mailbox": "admin"}).status_code == 403
    assert mail.outbox == [] and _domains(account_a) == []


@pytest.mark.parametrize(
    "domain,mailbox",
    [
        ("not a domain", "admin"),
        ("localhost", "admin"),
        ("", "admin"),
        ("beta.test", "ceo"),
        ("a" * 300 + ".test", "admin"),
    ],
)
def test_bad_input_says_why_and_sends_nothing(account_a, owner_a, domain, mailbox, django_capture_on_commit_callbacks):
    team = _team(owner_a)
    with django_capture_on_commit_callbacks(execute=True):
        response = team.post("/team/domains/", {"domain": domain, "mailbox": mailbox}, follow=True)
    assert response.status_code == 200
    assert "domain" in response.content.decode().split('id="verified-domains"', 1)[0].lower()
    assert mail.outbox == [] and _domains(account_a) == []


def test_another_account_cannot_use_or_remove_a_domain(
    client, account_a, owner_a, account_b, owner_b, django_capture_on_commit_callbacks
):
    _ask(_team(owner_a), django_capture_on_commit_callbacks, domain="shared.test")
    link = LINK.search(mail.outbox[0].body).group(1)
    Client().post(link)
    with account_context(account_a):
        row = VerifiedDomain.objects.for_account(account_a).get()
    assert _team(owner_b).post(f"/team/domains/{row.pk}/remove/").status_code == 404
    assert len(_domains(account_a)) == 1
    assert "shared.test" not in _team(owner_b).get("/team/").content.decode()
    # B's token gets no benefit from A's domain.
    person = add_member(account_a, make_user("someone@shared.test"))
    scim_b = Scim(client, make_token(client, account_b))
    assert_error(scim_b.post("/Users", okta_user(person.email)), 409, "uniqueness")
    assert membership(account_b, person) is None


def test_forged_and_other_accounts_links_are_refused(account_a, account_b, owner_a, django_capture_on_commit_callbacks):
    _ask(_team(owner_a), django_capture_on_commit_callbacks)
    data = signing.loads(LINK.search(mail.outbox[0].body).group(1).split("/")[3], salt="accounts.verify-domain")
    for forged in ({**data, "n": "guess"}, {**data, "a": account_b.pk}):
        token = signing.dumps(forged, salt="accounts.verify-domain")
        assert Client().post(f"/domains/verify/{token}/").status_code == 404
    assert Client().post("/domains/verify/nonsense/").status_code == 404
    assert _domains(account_a)[0][1] is None
