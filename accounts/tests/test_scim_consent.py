"""SCIM and people who already have a Groundwork login: a provider's token never pulls in
someone who signed in or belongs to another team; they get an invitation to accept, unless
their address is in a domain the account verified. And an address a provider claimed for
someone who never signed in does not stop that person signing up."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.test import Client

from accounts.models import Invitation, Membership, Role, User
from accounts.resolution import resolve_session
from accounts.selectors import membership_list_for_user
from accounts.tests.factories import PASSWORD, make_user
from accounts.tests.test_scim import Scim, assert_error, make_token, membership, okta_user
from audit.models import AuditEntry
from core.tenancy import account_context

pytestmark = pytest.mark.django_db

INVITATION_LINK = re.compile(r"http://testserver(/invitations/[^\s/]+/)")
SET_PASSWORD_LINK = re.compile(r"http://testserver(/password-reset/[^\s/]+/[^\s/]+/)")


@pytest.fixture
def scim_a(client, account_a):
    return Scim(client, make_token(client, account_a))


def _post(scim, email, capture):
    with capture(execute=True):
        return scim.post("/Users", okta_user(email))


def _pending(account):
    with account_context(account):
        return list(
            Invitation.objects.for_account(account).filter(accepted_at__isnull=True).values_list("email", flat=True)
        )


def test_another_teams_owner_is_invited_not_pulled_in(
    scim_a, account_a, owner_a, account_b, owner_b, django_capture_on_commit_callbacks
):
    body = assert_error(_post(scim_a, "owner@beta.test", django_capture_on_commit_callbacks), 409, "uniqueness")
    assert "invitation" in body["detail"] and "accept" in body["detail"], body
    assert membership(account_a, owner_b) is None
    assert _pending(account_a) == ["owner@beta.test"], (body, mail.outbox)
    [sent] = [m for m in mail.outbox if m.to == ["owner@beta.test"]]
    # The Team page lists it as pending; the log says the token sent it.
    team = Client()
    team.force_login(owner_a)
    assert "owner@beta.test" in team.get("/team/").content.decode().split("Pending invitations", 1)[1]
    with account_context(account_a):
        entry = AuditEntry.objects.for_account(account_a).get(action="invitation.create")
    assert entry.actor_label.startswith("SCIM provisioning (gwscim_")
    # Their password sign-in still lands in their own team.
    beta = Client()
    assert beta.post("/login/", {"username": "owner@beta.test", "password": PASSWORD}).status_code == 302
    assert resolve_session(owner_b, beta.session).account == account_b
    # The provider's retry sends no second invitation.
    mail.outbox.clear()
    again = assert_error(_post(scim_a, "owner@beta.test", django_capture_on_commit_callbacks), 409, "uniqueness")
    assert "pending" in again["detail"] and mail.outbox == [] and _pending(account_a) == ["owner@beta.test"]
    # Accepting makes them a member of A, where the provider then finds them.
    link = INVITATION_LINK.search(sent.body).group(1)
    beta.post(link)
    assert membership(account_a, owner_b).role == Role.MEMBER
    found = scim_a.get("/Users", filter='userName eq "owner@beta.test"').json()
    assert found["totalResults"] == 1 and found["Resources"][0]["active"] is True


def test_someone_who_signed_up_with_no_team_left_is_invited_too(scim_a, account_a, django_capture_on_commit_callbacks):
    person = make_user("loner@example.test")  # a password of their own: they use Groundwork
    assert_error(_post(scim_a, person.email, django_capture_on_commit_callbacks), 409, "uniqueness")
    assert membership(account_a, person) is None and _pending(account_a) == [person.email]


def test_a_new_address_still_joins_at_once(scim_a, account_a, django_capture_on_commit_callbacks):
    assert _post(scim_a, "fresh@example.test", django_capture_on_commit_callbacks).status_code == 201
    assert membership(account_a, User.objects.get(email="fresh@example.test")).role == Role.MEMBER
    assert _pending(account_a) == []


def test_a_person_a_provider_made_signs_up_by_setting_a_password_and_keeps_the_membership(
    scim_a, account_a, django_capture_on_commit_callbacks
):
    assert _post(scim_a, "newperson@example.test", django_capture_on_commit_callbacks).status_code == 201
    mail.outbox.clear()
    visitor = Client()
    with django_capture_on_commit_callbacks(execute=True):
        response = visitor.post(
            "/signup/",
            {
                "email": "NewPerson@example.test",
                "password": PASSWORD,
                "account_name": "Mine",
                "full_name": "New Person",
            },
        )
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert "already exists" not in visitor.get(response["Location"]).content.decode()
    [sent] = mail.outbox
    assert sent.to == ["newperson@example.test"]
    # Opening the link (it proves the address) sets their password: their login is made.
    link = SET_PASSWORD_LINK.search(sent.body).group(1)
    form_page = visitor.get(link, follow=True)
    assert form_page.status_code == 200
    set_url = form_page.redirect_chain[-1][0] if form_page.redirect_chain else link
    done = visitor.post(
        set_url, {"new_password1": "a-fresh-long-passphrase", "new_password2": "a-fresh-long-passphrase"}
    )
    assert done.status_code == 302
    person = User.objects.get(email="newperson@example.test")
    browser = Client()
    assert (
        browser.post(
            "/login/", {"username": "newperson@example.test", "password": "a-fresh-long-passphrase"}
        ).status_code
        == 302
    )
    assert resolve_session(person, browser.session).account == account_a
    assert [m.account_id for m in membership_list_for_user(user=person)] == [account_a.pk]
    # The link works once.
    assert Client().get(link, follow=True).context["validlink"] is False


def test_signing_up_with_an_address_someone_uses_still_says_it_exists(
    account_a, owner_a, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().post("/signup/", {"email": owner_a.email, "password": PASSWORD, "account_name": "X"})
    assert response.status_code == 200 and "already exists" in response.content.decode()
    assert mail.outbox == []


def test_a_provider_made_person_in_two_teams_is_invited_by_the_second(
    client, account_a, account_b, django_capture_on_commit_callbacks
):
    scim_a, scim_b = Scim(client, make_token(client, account_a)), Scim(client, make_token(client, account_b))
    assert _post(scim_a, "shared@example.test", django_capture_on_commit_callbacks).status_code == 201
    assert_error(_post(scim_b, "shared@example.test", django_capture_on_commit_callbacks), 409, "uniqueness")
    person = User.objects.get(email="shared@example.test")
    assert membership(account_b, person) is None and _pending(account_b) == ["shared@example.test"]
    with account_context(account_b):
        assert not Membership.objects.for_account(account_b).filter(user=person).exists()


def test_a_person_a_provider_made_can_also_use_forgot_password(scim_a, django_capture_on_commit_callbacks):
    assert _post(scim_a, "forgot@example.test", django_capture_on_commit_callbacks).status_code == 201
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert Client().post("/password-reset/", {"email": "forgot@example.test"}).status_code == 302
    [sent] = mail.outbox
    assert sent.to == ["forgot@example.test"] and SET_PASSWORD_LINK.search(sent.body)
