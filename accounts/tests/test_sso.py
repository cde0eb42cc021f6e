"""Single sign-on (OIDC) end to end against a real provider on loopback (oidc-provider-mock,
accounts/tests/oidc_provider.py): /sso/login/ → the provider → /sso/callback/, the rules for
who signs in, every refusal a person can meet, and the owner's "Members must sign in with SSO"."""

from __future__ import annotations

import socket
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings as django_settings
from django.test import Client

from accounts import services
from accounts.models import Account, Invitation, Membership, Role, SsoIdentity, User
from accounts.sso.services import account_sso_required_set
from accounts.tests.factories import add_member, make_api_key, make_user, staff_with
from accounts.tests.oidc_provider import Provider, path_of
from audit.models import AuditEntry
from billing.selectors import balance_get
from core.tenancy import account_context

pytestmark = pytest.mark.django_db

CLIENT_ID = "groundwork-tests"


@pytest.fixture
def provider(settings):
    provider = Provider().start()
    settings.OIDC_ISSUER = provider.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = "tests-secret"
    settings.OIDC_CREATE_USERS = False
    yield provider
    provider.stop()


def _start(client: Client) -> str:
    response = client.get("/sso/login/")
    assert response.status_code == 302, response.content
    return response["Location"]


def _sso(client: Client, provider: Provider, sub: str):
    """The person clicks "Sign in with SSO", signs in at the provider as `sub`, comes back."""
    return client.get(path_of(provider.authorize(_start(client), sub)))


def _signed_in_as(client: Client) -> int | None:
    value = client.session.get("_auth_user_id")
    return int(value) if value else None


def _refused(response, status: int, words: str):
    assert response.status_code == status, response.content
    page = response.content.decode()
    assert words in page, page
    assert "Log in" in page and "Sign in with SSO" in page  # the login page, the way back in
    assert "Traceback" not in page


def _audit(account, action):
    with account_context(account):
        return list(AuditEntry.objects.for_account(account).filter(action=action))


# --- the button and the redirect ------------------------------------------------------------


def test_sso_button_and_pages_only_when_sso_is_set_up(client, settings):
    settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID = "", ""
    assert "Sign in with SSO" not in client.get("/login/").content.decode()
    refused = client.get("/sso/login/", follow=True)
    assert refused.redirect_chain == [("/login/", 302)]
    assert "Single sign-on is not set up on this server" in refused.content.decode()
    assert client.get("/sso/callback/?code=x&state=y").status_code == 404
    settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID = "http://127.0.0.1:9", CLIENT_ID
    for page in ("/login/", "/signup/"):
        assert 'href="/sso/login/">Sign in with SSO</a>' in client.get(page).content.decode()


def test_login_redirects_to_the_provider_with_state_nonce_and_pkce(client, provider):
    assert provider.requests == []  # nothing asked of the provider before the first sign-in
    location = _start(client)
    query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert location.startswith(provider.issuer + "/oauth2/authorize?")
    assert query["client_id"] == CLIENT_ID and query["response_type"] == "code"
    assert query["redirect_uri"] == "http://testserver/sso/callback/"
    assert set(query["scope"].split()) == {"openid", "email", "profile"}
    assert query["state"] and query["nonce"] and query["code_challenge"] and query["code_challenge_method"] == "S256"


# --- who signs in ------------------------------------------------------------------------------


def test_an_existing_user_signs_in_and_keeps_their_identity_when_the_address_changes(client, provider, account_a):
    owner = account_a.test_owner
    provider.user("ann-at-idp", email="Owner@Acme.test", email_verified=True, name="Ann Owner")
    response = _sso(client, provider, "ann-at-idp")
    assert response.status_code == 302 and response["Location"] == "/"
    assert _signed_in_as(client) == owner.pk
    home = client.get("/")
    assert home.status_code == 200 and "Acme" in home.content.decode()
    identity = SsoIdentity.objects.get(issuer=provider.issuer, subject="ann-at-idp")
    assert identity.user == owner
    assert [e.target for e in _audit(account_a, "sso.link")] == ["owner@acme.test"]
    # The provider changes her address: the same subject is still the same person.
    provider.user("ann-at-idp", email="ann.new@acme.test", email_verified=True)
    again = Client()
    assert _sso(again, provider, "ann-at-idp").status_code == 302
    assert _signed_in_as(again) == owner.pk
    # The discovery document was read at the first sign-in, and kept.
    assert provider.requests.count("/.well-known/openid-configuration") == 1
    assert User.objects.filter(email__iexact="ann.new@acme.test").count() == 0
    # Another subject claiming her (verified) address does not take her over.
    provider.user("someone-else", email="owner@acme.test", email_verified=True)
    intruder = Client()
    _refused(_sso(intruder, provider, "someone-else"), 403, "already linked to another identity")
    assert _signed_in_as(intruder) is None
    assert SsoIdentity.objects.filter(user=owner).count() == 1


def test_an_invited_address_joins_that_account_without_a_team_of_its_own(client, provider, account_a):
    with account_context(account_a):
        services.member_invite(account=account_a, actor=account_a.test_owner, email="new@acme.test", role=Role.MEMBER)
    provider.user("new-at-idp", email="new@acme.test", email_verified=True)
    response = _sso(client, provider, "new-at-idp")
    assert response.status_code == 302
    user = User.objects.get(email="new@acme.test")
    assert _signed_in_as(client) == user.pk
    with account_context(account_a):
        assert Membership.objects.for_account(account_a).get(user=user).role == Role.MEMBER
        assert Invitation.objects.for_account(account_a).get(email="new@acme.test").accepted_by == user
    assert Account.objects.filter(created_by=user).count() == 0 and user.signup_account_id is None
    assert not user.has_usable_password()
    assert client.session["account_id"] == account_a.pk
    assert "You joined Acme" in client.get("/").content.decode()


def test_an_unknown_address_is_refused_unless_oidc_create_users(client, provider, settings):
    provider.user("stranger", email="stranger@elsewhere.test", email_verified=True)
    _refused(_sso(client, provider, "stranger"), 403, "no Groundwork user with the address stranger@elsewhere.test")
    assert not User.objects.filter(email="stranger@elsewhere.test").exists()
    assert not SsoIdentity.objects.exists()
    settings.OIDC_CREATE_USERS = True
    assert _sso(client, provider, "stranger").status_code == 302
    user = User.objects.get(email="stranger@elsewhere.test")
    team = Account.objects.get(created_by=user)
    assert user.signup_account == team and user.email_verified_at is not None
    with account_context(team):
        assert Membership.objects.for_account(team).get(user=user).role == Role.OWNER
        assert balance_get(account=team) == django_settings.SIGNUP_CREDITS  # as sign-up pays a verified person
    assert _signed_in_as(client) == user.pk


# --- refusals --------------------------------------------------------------------------------


def test_an_unverified_address_is_refused(client, provider, account_a):
    provider.user("unverified", email="owner@acme.test", email_verified=False)
    _refused(_sso(client, provider, "unverified"), 403, "has not verified the address owner@acme.test")
    provider.user("no-claim", email="owner@acme.test")  # no email_verified at all: not verified either
    _refused(_sso(client, provider, "no-claim"), 403, "has not verified")
    assert _signed_in_as(client) is None and not SsoIdentity.objects.exists()


@pytest.mark.parametrize(
    "mode, status, words",
    [
        ("audience", 400, "meant for another application"),
        ("issuer", 400, "came from another provider"),
        ("nonce", 400, "nonce mismatch"),
        ("signature", 400, "invalid signature"),
    ],
)
def test_a_tampered_id_token_is_refused(client, provider, account_a, mode, status, words, caplog):
    provider.user("ann-at-idp", email="owner@acme.test", email_verified=True)
    provider.tamper(mode)
    with caplog.at_level("WARNING", logger="groundwork.sso"):
        _refused(_sso(client, provider, "ann-at-idp"), status, words)
    assert _signed_in_as(client) is None and not SsoIdentity.objects.exists()
    assert any("refused" in r.getMessage() for r in caplog.records)
    provider.tamper(None)  # the same provider, honest again: the sign-in works
    assert _sso(client, provider, "ann-at-idp").status_code == 302


def test_a_replayed_or_foreign_callback_is_refused(client, provider, account_a):
    provider.user("ann-at-idp", email="owner@acme.test", email_verified=True)
    callback = path_of(provider.authorize(_start(client), "ann-at-idp"))
    # Another browser (login CSRF: someone else's code and state): that session never started it.
    other = Client()
    _refused(other.get(callback), 400, "already used or has expired")
    assert _signed_in_as(other) is None
    assert client.get(callback).status_code == 302
    client.logout()
    _refused(client.get(callback), 400, "already used or has expired")  # the state is used once
    _refused(Client().get("/sso/callback/"), 400, "already used or has expired")  # no state at all
    assert _signed_in_as(client) is None


def test_the_person_denying_at_the_provider_is_told_so(client, provider):
    location = _start(client)
    _refused(client.get(path_of(provider.authorize(location, "", deny=True))), 403, "did not sign you in")


def test_an_unreachable_provider_is_a_message_not_a_500(client, provider, settings):
    provider.user("ann-at-idp", email="owner@acme.test", email_verified=True)
    location = _start(client)  # discovery worked; the provider goes down before the callback
    callback = path_of(provider.authorize(location, "ann-at-idp"))
    provider.stop()
    _refused(client.get(callback), 502, "could not be reached")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    settings.OIDC_ISSUER = f"http://127.0.0.1:{closed_port}"
    _refused(Client().get("/sso/login/"), 502, "could not be reached")


# --- "Members must sign in with SSO" ------------------------------------------------------------


def test_only_owners_turn_it_on_and_only_after_signing_in_with_sso(provider, account_a, account_b):
    owner = account_a.test_owner
    add_member(account_a, make_user("admin@acme.test"), role=Role.ADMIN)
    provider.user("owner", email="owner@acme.test", email_verified=True)
    provider.user("admin", email="admin@acme.test", email_verified=True)
    password_owner = Client()
    password_owner.force_login(owner)
    response = password_owner.post("/team/sso/", {"required": "1"}, follow=True)
    assert "Sign in with SSO first" in response.content.decode()
    account_a.refresh_from_db()
    assert not account_a.sso_required
    sso_admin = Client()
    _sso(sso_admin, provider, "admin")
    assert sso_admin.post("/team/sso/", {"required": "1"}).status_code == 403
    sso_owner = Client()
    _sso(sso_owner, provider, "owner")
    team = sso_owner.get("/team/").content.decode()
    assert "Members must sign in with SSO" in team
    assert "Members must sign in with SSO" not in sso_admin.get("/team/").content.decode()
    assert sso_owner.post("/team/sso/", {"required": "1"}).status_code == 302
    account_a.refresh_from_db()
    account_b.refresh_from_db()
    assert account_a.sso_required and not account_b.sso_required  # only the owner's own account
    assert [e.detail for e in _audit(account_a, "account.sso_required")] == [{"required": True}]
    assert _audit(account_b, "account.sso_required") == []
    # A password (a stolen one, say) cannot lift it: that session no longer reaches the team.
    assert password_owner.post("/team/sso/", {"required": "0"}).status_code == 403
    account_a.refresh_from_db()
    assert account_a.sso_required
    assert sso_owner.post("/team/sso/", {"required": "0"}).status_code == 302
    account_a.refresh_from_db()
    assert not account_a.sso_required
    assert len(_audit(account_a, "account.sso_required")) == 2


def test_cannot_be_required_where_sso_is_not_set_up(account_a, settings):
    settings.OIDC_ISSUER = ""
    with account_context(account_a):
        with pytest.raises(services.AccountError, match="not set up"):
            account_sso_required_set(
                account=account_a, actor=account_a.test_owner, required=True, actor_signed_in_with_sso=True
            )


def test_a_password_session_cannot_use_an_account_that_requires_sso(provider, account_a, account_b):
    member = add_member(account_a, make_user("member@acme.test"), role=Role.MEMBER)
    add_member(account_b, member, role=Role.MEMBER)
    Account.objects.filter(pk=account_a.pk).update(sso_required=True)
    key = make_api_key(account_a)
    provider.user("member", email="member@acme.test", email_verified=True)

    password = Client()
    password.force_login(member)
    session = password.session
    session["account_id"] = account_a.pk
    session.save()
    for page in ("/", "/team/", "/documents/", "/chat/", "/credits/"):
        response = password.get(page)
        body = response.content.decode()
        assert response.status_code == 403, page
        assert "Acme requires single sign-on" in body and "Sign in with SSO" in body, page
        assert "Beta" in body  # the way to the team that does not require it
    assert password.get("/api/v1/documents/").status_code in (401, 403)  # the session API too
    # API keys are not sessions: unaffected.
    assert Client().get("/api/v1/documents/", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200
    # The other account is unaffected, for the same password session.
    assert password.post("/accounts/switch/", {"account_id": account_b.pk}).status_code == 302
    assert password.get("/").status_code == 200
    # Signing in with SSO from the refusal page opens Acme.
    password.post("/accounts/switch/", {"account_id": account_a.pk})
    assert _sso(password, provider, "member").status_code == 302
    assert password.get("/").status_code == 200 and password.get("/documents/").status_code == 200
    # A later password login in the same browser is a password session again.
    password.logout()
    assert (
        password.post(
            "/login/", {"username": "member@acme.test", "password": "correct-horse-battery-staple"}
        ).status_code
        == 302
    )
    assert password.get("/").status_code == 403


def test_accounts_that_do_not_require_it_keep_password_sign_in(client, account_a, account_b):
    Account.objects.filter(pk=account_a.pk).update(sso_required=True)
    client.force_login(account_b.test_owner)
    assert client.get("/").status_code == 200 and client.get("/team/").status_code == 200


# The websocket's side of the switch is chat/tests/test_sso_socket.py (the chat tests' one server loop).


def test_support_sees_the_links_and_only_credential_setters_remove_one(client, provider, account_a):

    provider.user("ann-at-idp", email="owner@acme.test", email_verified=True)
    _sso(Client(), provider, "ann-at-idp")
    link = SsoIdentity.objects.get()
    viewer = staff_with("accounts.view_ssoidentity", "accounts.delete_ssoidentity")
    client.force_login(viewer)
    listing = client.get("/admin/accounts/ssoidentity/")
    assert listing.status_code == 200 and "ann-at-idp" in listing.content.decode()
    assert client.post(f"/admin/accounts/ssoidentity/{link.pk}/delete/", {"post": "yes"}).status_code == 403
    assert SsoIdentity.objects.filter(pk=link.pk).exists()
    client.force_login(
        staff_with("accounts.view_ssoidentity", "accounts.delete_ssoidentity", "accounts.set_user_credentials")
    )
    assert client.post(f"/admin/accounts/ssoidentity/{link.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not SsoIdentity.objects.filter(pk=link.pk).exists()


# --- staff and the provider's MFA ----------------------------------------------------------


@pytest.mark.parametrize("kind", ["is_staff", "is_superuser"])
def test_staff_sign_in_with_sso_until_a_team_requires_their_password_and_code(provider, account_a, kind):
    staff = add_member(account_a, make_user("support@acme.test", **{kind: True}))
    member = add_member(account_a, make_user("member@acme.test"))
    provider.user("support", email=staff.email, email_verified=True)
    provider.user("member", email=member.email, email_verified=True)
    # Off (the default): the provider's verified address signs in anyone, staff included,
    # without Groundwork's own second step: the provider's MFA counts.
    first = Client()
    assert _sso(first, provider, "support").status_code == 302 and _signed_in_as(first) == staff.pk
    # Only owners turn it on (admins get 403), on the Team page; it is audited.
    admin = add_member(account_a, role=Role.ADMIN)
    admin_browser = Client()
    admin_browser.force_login(admin)
    assert admin_browser.post("/team/sso/staff/", {"required": "1"}).status_code == 403
    owner = Client()
    owner.force_login(account_a.test_owner)
    assert "Staff must use a password + 2FA" in owner.get("/team/").content.decode()
    assert owner.post("/team/sso/staff/", {"required": "1"}).status_code == 302
    account_a.refresh_from_db()
    assert account_a.staff_password_2fa
    assert [e.detail for e in _audit(account_a, "account.staff_password_2fa")] == [{"required": True}]
    # Now staff are refused at the callback (nothing signed in), members are not.
    refused = Client()
    _refused(_sso(refused, provider, "support"), 403, "password and two-factor code")
    assert _signed_in_as(refused) is None
    other = Client()
    assert _sso(other, provider, "member").status_code == 302 and _signed_in_as(other) == member.pk
    # Their password still signs them in.
    assert (
        Client().post("/login/", {"username": staff.email, "password": "correct-horse-battery-staple"}).status_code
        == 302
    )


def test_where_sso_is_required_a_staff_password_and_code_session_opens_the_team(provider, account_a):
    from accounts.tests.test_two_factor import code_for, password_step, turn_on

    staff = add_member(account_a, make_user("support@acme.test", is_staff=True))
    password_only = Client()
    assert (
        password_only.post("/login/", {"username": staff.email, "password": "correct-horse-battery-staple"}).status_code
        == 302
    )
    secret, _ = turn_on(password_only)  # two-factor sign-in set up before the team required SSO
    Account.objects.filter(pk=account_a.pk).update(sso_required=True, staff_password_2fa=True)
    # A session without the second step: the "requires single sign-on" page, as for everyone.
    without_code = Client()
    without_code.force_login(staff)
    assert without_code.get("/").status_code == 403
    # With their password and two-factor code: the team opens.
    browser = password_step(staff)
    assert browser.post("/login/code/", {"code": code_for(secret, steps_ahead=1)}).status_code == 302
    assert browser.get("/").status_code == 200 and browser.get("/documents/").status_code == 200
    # A member who is not staff gets no such way round it.
    member = add_member(account_a, make_user("member@acme.test"))
    plain = Client()
    plain.force_login(member)
    assert plain.get("/").status_code == 403
