"""Signing up through an invitation joins the inviting account only.

Before the fix the invitation's "sign up" link led to the ordinary sign-up, which made the
person a team of their own (unasked, with its own empty ledger) before they could accept:
two teams in their switcher. Now the link carries the invitation: the form comes with the
invited address filled in and fixed, has no team name, and submitting it accepts the
invitation (the link proves the address), landing on the inviting account's dashboard.
"""

import re

import pytest
from django.core import mail
from django.test import Client

from accounts.models import Account, Invitation, User
from accounts.selectors import membership_list_for_user
from accounts.tests.factories import PASSWORD, make_user
from core.tenancy import account_context

pytestmark = pytest.mark.django_db(transaction=True)

NEWHIRE = "newhire@acme.test"
LINK = re.compile(r"http://testserver(/invitations/[^\s/]+/)")
SIGNUP_HREF = re.compile(r'href="(/signup/\?invitation=[^"]+)"')


def _invite(client_a, email=NEWHIRE, role="admin") -> str:
    mail.outbox.clear()
    assert client_a.post("/team/invite/", {"email": email, "role": role}).status_code == 302
    [message] = [m for m in mail.outbox if email in m.to]
    return LINK.search(message.body).group(1)


def _signup_link(link: str) -> str:
    """The invitation page's "sign up" link, as an anonymous visitor sees it."""
    page = Client().get(link).content.decode()
    return SIGNUP_HREF.search(page).group(1).replace("&amp;", "&")


def test_signing_up_from_an_invitation_joins_only_the_inviting_account(client_a, account_a):
    link = _invite(client_a)
    accounts_before = Account.objects.count()
    client = Client()
    signup = _signup_link(link)
    page = client.get(signup)
    body = page.content.decode()
    assert page.status_code == 200 and "Join Acme" in body
    # The invited address is filled in and cannot be changed; there is no team to name.
    assert re.search(r'<input type="email" name="email" value="newhire@acme.test"[^>]* readonly', body)
    assert 'name="account_name"' not in body

    response = client.post(signup, {"email": "someone-else@evil.test", "password": PASSWORD, "full_name": "New Hire"})
    assert response.status_code == 302 and response["Location"] == "/"
    user = User.objects.get(email=NEWHIRE)
    assert not User.objects.filter(email="someone-else@evil.test").exists()
    assert [m.account_id for m in membership_list_for_user(user=user)] == [account_a.pk]
    assert Account.objects.count() == accounts_before
    assert user.email_verified_at is not None and user.signup_account_id is None
    assert user.full_name == "New Hire"
    with account_context(account_a):
        invitation = Invitation.objects.for_account(account_a).get(email=NEWHIRE)
        assert invitation.accepted_by == user
    # Logged in, on the inviting account's dashboard, with one team in the switcher.
    home = client.get("/").content.decode()
    assert "Acme" in home and "Own team" not in home
    assert client.get("/team/").status_code == 200  # invited as admin


def test_accepting_after_signing_up_the_old_way_leaves_the_own_team_they_made(client_a, account_a):
    """The ordinary sign-up still makes a team (the person asked for one by naming it): an
    invitation accepted later adds the inviting account, nothing more."""
    link = _invite(client_a)
    client = Client()
    assert (
        client.post("/signup/", {"email": NEWHIRE, "password": PASSWORD, "account_name": "Own team"}).status_code == 302
    )
    assert client.post(link, {"action": "accept"}).status_code == 302
    assert len(membership_list_for_user(user=User.objects.get(email=NEWHIRE))) == 2


def test_an_existing_user_is_told_to_log_in_and_nothing_is_made(client_a, account_a):
    make_user(NEWHIRE)
    link = _invite(client_a)
    accounts_before = Account.objects.count()
    client = Client()
    signup = _signup_link(link)
    response = client.post(signup, {"password": PASSWORD})
    body = response.content.decode()
    assert response.status_code == 200 and "already exists" in body
    assert f"/login/?next={link}" in body
    assert Account.objects.count() == accounts_before
    assert not client.session.get("_auth_user_id")


@pytest.mark.parametrize("token", ["forged", ""])
def test_a_bad_invitation_token_is_refused_and_makes_nothing(token):
    users = User.objects.count()
    client = Client()
    page = client.get(f"/signup/?invitation={token}")
    if token:
        assert page.status_code == 404 and "not valid" in page.content.decode()
        assert client.post(f"/signup/?invitation={token}", {"password": PASSWORD}).status_code == 404
    else:  # no invitation: the ordinary sign-up
        assert page.status_code == 200 and 'name="account_name"' in page.content.decode()
    assert User.objects.count() == users


def test_a_used_invitation_cannot_sign_up_a_second_person(client_a, account_a):
    link = _invite(client_a)
    signup = _signup_link(link)
    assert Client().post(signup, {"password": PASSWORD}).status_code == 302
    again = Client().post(signup, {"password": PASSWORD})
    assert again.status_code == 410 and "already been used" in again.content.decode()


def test_a_weak_password_keeps_the_form_and_makes_nothing(client_a, account_a):
    link = _invite(client_a)
    response = Client().post(_signup_link(link), {"password": "123"})
    assert response.status_code == 200 and "newhire@acme.test" in response.content.decode()
    assert not User.objects.filter(email=NEWHIRE).exists()
    with account_context(account_a):
        assert Invitation.objects.for_account(account_a).get(email=NEWHIRE).accepted_at is None
