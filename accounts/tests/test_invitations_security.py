"""Invited seats cannot be taken.

An invitation is accepted only by someone who proves control of the invited address: a
signed, single-use, expiring link sent by email, opened while logged in as that address,
then an explicit Accept. Signing up with an invited address joins nothing by itself, and
an existing user joins only when they accept. Logging in lands in the last-used account.
"""

import re
from datetime import timedelta

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from accounts.models import Invitation, Membership, User
from accounts.selectors import membership_list_for_user
from accounts.tests.factories import PASSWORD, add_member, make_user
from core.tenancy import account_context

# transaction=True: the emails are sent when the transaction commits, as in production.
pytestmark = pytest.mark.django_db(transaction=True)

NEWHIRE = "newhire@acme.test"
LINK = re.compile(r"http://testserver(/invitations/[^\s/]+/)")
VERIFY = re.compile(r"http://testserver(/verify-email/[^\s/]+/)")


def _invite(client_a, email=NEWHIRE, role="admin") -> str:
    """The owner invites `email` on the Team page; returns the path of the emailed link."""
    mail.outbox.clear()
    response = client_a.post("/team/invite/", {"email": email, "role": role})
    assert response.status_code == 302
    [message] = [m for m in mail.outbox if email in m.to]
    assert "Acme" in message.subject + message.body
    return LINK.search(message.body).group(1)


def _signup(email=NEWHIRE, name="Own team") -> Client:
    client = Client()
    response = client.post("/signup/", {"email": email, "password": PASSWORD, "account_name": name})
    assert response.status_code == 302, response.content.decode()[:2000]
    return client


def _accounts_of(email) -> set[int]:
    return {m.account_id for m in membership_list_for_user(user=User.objects.get(email=email))}


def _member(account, email):
    with account_context(account):
        return Membership.objects.for_account(account).filter(user__email=email).first()


def test_a_stranger_signing_up_with_an_invited_email_does_not_join(client_a, account_a):
    _invite(client_a)
    stranger = _signup()
    assert account_a.pk not in _accounts_of(NEWHIRE)
    assert _member(account_a, NEWHIRE) is None
    assert stranger.post("/accounts/switch/", {"account_id": account_a.pk}).status_code == 404
    assert "Acme" not in stranger.get("/").content.decode()
    # Nor does verifying the address they signed up with join the team: only Accept does.
    [verify] = [m for m in mail.outbox if NEWHIRE in m.to and "/verify-email/" in m.body]
    stranger.get(VERIFY.search(verify.body).group(1))
    assert _member(account_a, NEWHIRE) is None


def test_the_link_is_accepted_once_by_the_invited_address(client_a, account_a):
    link = _invite(client_a)
    newhire = _signup()
    page = newhire.get(link)
    assert page.status_code == 200
    body = page.content.decode()
    assert "Acme" in body and "Accept" in body and NEWHIRE in body
    assert _member(account_a, NEWHIRE) is None, "opening the link must not join"
    response = newhire.post(link, {"action": "accept"})
    assert response.status_code == 302
    assert _member(account_a, NEWHIRE).role == "admin"
    assert "<h1>Acme</h1>" in newhire.get("/").content.decode(), "lands in the team just joined"
    # Used: the same link again is refused with a clear page, and nothing changes.
    for again in (newhire.get(link), newhire.post(link, {"action": "accept"})):
        assert again.status_code == 410
        assert "already been used" in again.content.decode()
    with account_context(account_a):
        assert Membership.objects.for_account(account_a).filter(user__email=NEWHIRE).count() == 1


def test_accepting_the_link_proves_the_address(client_a, account_a, settings):
    """The link reached the address, so it verifies it (and pays the own team's starting credits)."""
    from billing.selectors import balance_get

    link = _invite(client_a)
    newhire = _signup()
    user = User.objects.get(email=NEWHIRE)
    assert user.email_verified_at is None
    newhire.post(link, {"action": "accept"})
    user.refresh_from_db()
    assert user.email_verified_at is not None
    with account_context(user.signup_account):
        assert balance_get(account=user.signup_account) == settings.SIGNUP_CREDITS


def test_an_expired_link_is_refused(client_a, account_a):
    link = _invite(client_a)
    newhire = _signup()
    with account_context(account_a):
        Invitation.objects.for_account(account_a).update(expires_at=timezone.now() - timedelta(seconds=1))
    for response in (newhire.get(link), newhire.post(link, {"action": "accept"})):
        assert response.status_code == 410
        assert "expired" in response.content.decode()
    assert _member(account_a, NEWHIRE) is None


def test_forged_links_are_refused(client_a, account_a):
    link = _invite(client_a)
    newhire = _signup()
    token = link.split("/")[2]
    forged = [
        f"/invitations/{token[:-2]}{'AA' if token[-2:] != 'AA' else 'BB'}/",  # tampered signature
        "/invitations/not-a-token/",
    ]
    # A well-signed token whose secret is not the invitation's (e.g. one replaced by a new invite).
    from django.core import signing

    payload = signing.loads(token, salt="accounts.invitation")
    forged.append("/invitations/" + signing.dumps({**payload, "n": "guessed"}, salt="accounts.invitation") + "/")
    # Signed with another key: refused.
    forged.append("/invitations/" + signing.dumps(payload, key="another-key", salt="accounts.invitation") + "/")
    for path in forged:
        for response in (newhire.get(path), newhire.post(path, {"action": "accept"})):
            assert response.status_code == 404, path
            assert "not valid" in response.content.decode()
    assert _member(account_a, NEWHIRE) is None


def test_the_link_opened_by_another_logged_in_user_does_not_join(client_a, account_a, account_b, owner_b):
    link = _invite(client_a)
    other = Client()
    other.force_login(owner_b)
    for response in (other.get(link), other.post(link, {"action": "accept"})):
        assert response.status_code == 403
        assert NEWHIRE in response.content.decode()
    assert _member(account_a, owner_b.email) is None
    # The invitation is still there for the person it was sent to.
    newhire = _signup()
    assert newhire.post(link, {"action": "accept"}).status_code == 302
    assert _member(account_a, NEWHIRE) is not None


def test_anonymous_link_asks_to_sign_up_or_log_in_as_the_address(client_a, account_a):
    link = _invite(client_a)
    page = Client().get(link)
    body = page.content.decode()
    assert page.status_code == 200
    assert NEWHIRE in body and "Acme" in body
    token = link.split("/")[2]
    assert f"/signup/?invitation={token}" in body and f"/login/?next={link}" in body
    # Signing up from there is the invitation's own sign-up (accounts/tests/test_invitation_signup.py):
    # the link proves the address, so submitting it joins, and makes no team of one's own.
    client = Client()
    response = client.post(f"/signup/?invitation={token}", {"password": PASSWORD, "account_name": "Mine"})
    assert response["Location"] == "/"
    assert _member(account_a, NEWHIRE).role == "admin"
    assert _accounts_of(NEWHIRE) == {account_a.pk}


def test_an_existing_user_sees_the_invitation_and_joins_only_on_accept(client_a, account_a):
    carol = make_user("carol@example.test", email_verified_at=timezone.now())
    _invite(client_a, email="carol@example.test", role="member")
    assert _member(account_a, carol.email) is None, "an existing user is not added before accepting"
    assert account_a.pk not in _accounts_of(carol.email)
    client = Client()
    client.force_login(carol)
    home = client.get("/").content.decode()
    assert "Invitations" in home and "Acme" in home
    [invitation_id] = re.findall(r"/invitations/(\d+)/accept/", home)
    response = client.post(f"/invitations/{invitation_id}/accept/")
    assert response.status_code == 302
    assert _member(account_a, carol.email).role == "member"
    assert client.post(f"/invitations/{invitation_id}/accept/").status_code == 404


def test_an_existing_user_may_decline(client_a, account_a):
    carol = make_user("carol@example.test", email_verified_at=timezone.now())
    _invite(client_a, email="carol@example.test", role="member")
    client = Client()
    client.force_login(carol)
    [invitation_id] = re.findall(r"/invitations/(\d+)/accept/", client.get("/").content.decode())
    assert client.post(f"/invitations/{invitation_id}/decline/").status_code == 302
    assert _member(account_a, carol.email) is None
    assert "/accept/" not in client.get("/").content.decode()


def test_an_unverified_user_cannot_accept_from_the_dashboard(client_a, account_a):
    """Whoever signed up with the address first, without proving it, sees no invitation:
    only the emailed link (which proves the address) lets them in."""
    squatter = _signup()  # signs up before the invitation is sent
    _invite(client_a)
    home = squatter.get("/").content.decode()
    assert "/accept/" not in home
    with account_context(account_a):
        invitation = Invitation.objects.for_account(account_a).get(email=NEWHIRE)
    assert squatter.post(f"/invitations/{invitation.pk}/accept/").status_code == 404
    assert _member(account_a, NEWHIRE) is None


def test_another_users_invitation_id_is_a_404(client_a, account_a, account_b, owner_b):
    _invite(client_a, email="carol@example.test")
    with account_context(account_a):
        invitation = Invitation.objects.for_account(account_a).get()
    owner_b.email_verified_at = timezone.now()
    owner_b.save()
    other = Client()
    other.force_login(owner_b)
    assert other.post(f"/invitations/{invitation.pk}/accept/").status_code == 404
    assert _member(account_a, owner_b.email) is None


def test_login_lands_in_the_account_used_last(account_a, account_b, owner_a):
    add_member(account_b, user=owner_a)  # "Acme" sorts before "Beta"
    client = Client()
    assert client.post("/login/", {"username": owner_a.email, "password": PASSWORD}).status_code == 302
    assert "<h1>Acme</h1>" in client.get("/").content.decode()
    client.post("/accounts/switch/", {"account_id": account_b.pk})
    client.post("/logout/")
    client = Client()  # another browser, no session left
    client.post("/login/", {"username": owner_a.email, "password": PASSWORD})
    assert "<h1>Beta</h1>" in client.get("/").content.decode()


def test_last_used_account_left_falls_back_to_a_current_one(account_a, account_b, owner_a):
    membership_b = add_member(account_b, user=owner_a)
    client = Client()
    client.force_login(owner_a)
    client.post("/accounts/switch/", {"account_id": account_b.pk})
    with account_context(account_b):
        Membership.objects.for_account(account_b).filter(user=owner_a).delete()
    client = Client()
    client.post("/login/", {"username": owner_a.email, "password": PASSWORD})
    assert "<h1>Acme</h1>" in client.get("/").content.decode()
    del membership_b
