"""Account pages: sign-up, login/logout, switching, team management, API keys."""

import re

from django.core import mail

from accounts.models import Account, ApiKey, Invitation, Membership, User
from accounts.tests.factories import PASSWORD, add_member
from core.tenancy import account_context


def test_signup_logs_in_and_creates_the_account(client, db):
    response = client.post("/signup/", {"email": "new@example.test", "password": PASSWORD, "account_name": "Newco"})
    assert response.status_code == 302 and response["Location"] == "/"
    home = client.get("/")
    assert b"Newco" in home.content
    assert Account.objects.get().name == "Newco"


def test_signup_duplicate_email_shows_the_reason(client, account_a, owner_a):
    response = client.post("/signup/", {"email": owner_a.email.upper(), "password": PASSWORD})
    assert response.status_code == 200
    assert "already exists" in response.content.decode()
    assert User.objects.count() == 1


def test_signup_weak_password_shows_the_reason(client, db):
    response = client.post("/signup/", {"email": "a@example.test", "password": "12345678"})
    assert response.status_code == 200
    assert "too common" in response.content.decode() or "entirely numeric" in response.content.decode()
    assert not User.objects.exists()


def test_login_and_logout(client, account_a, owner_a):
    bad = client.post("/login/", {"username": owner_a.email, "password": "wrong"})
    assert "do not match" in bad.content.decode()
    good = client.post("/login/", {"username": owner_a.email, "password": PASSWORD})
    assert good.status_code == 302
    assert client.get("/").status_code == 200
    client.post("/logout/")
    assert client.get("/").status_code == 302


def test_inactive_user_cannot_log_in(client, account_a, owner_a):
    owner_a.is_active = False
    owner_a.save()
    response = client.post("/login/", {"username": owner_a.email, "password": PASSWORD})
    assert response.status_code == 200 and "_auth_user_id" not in client.session


def test_anonymous_pages_redirect_to_login(client, db):
    assert client.get("/team/")["Location"].startswith("/login/")


def test_user_switches_between_accounts(client, account_a, account_b, owner_a):
    add_member(account_b, user=owner_a)
    client.force_login(owner_a)
    assert b"Acme" in client.get("/").content
    client.post("/accounts/switch/", {"account_id": account_b.pk})
    page = client.get("/").content.decode()
    assert "<h1>Beta</h1>" in page


def test_switching_to_an_account_you_are_not_in_is_404(client, account_a, account_b, owner_a):
    client.force_login(owner_a)
    assert client.post("/accounts/switch/", {"account_id": account_b.pk}).status_code == 404
    assert client.post("/accounts/switch/", {"account_id": "x"}).status_code == 404
    assert "<h1>Acme</h1>" in client.get("/").content.decode()


def test_team_page_for_owner_and_forbidden_for_member(client, account_a, owner_a):
    member = add_member(account_a)
    client.force_login(member)
    assert client.get("/team/").status_code == 403
    assert client.post("/team/invite/", {"email": "x@example.test", "role": "member"}).status_code == 403
    with account_context(account_a):
        assert not Invitation.objects.for_account(account_a).exists()
    client.force_login(owner_a)
    page = client.get("/team/")
    assert page.status_code == 200 and member.email in page.content.decode()


def test_invite_existing_member_shows_a_clear_message(client_a, owner_a):
    response = client_a.post("/team/invite/", {"email": owner_a.email, "role": "member"}, follow=True)
    assert "already a member" in response.content.decode()


def test_last_owner_leaving_shows_a_clear_message(client_a, account_a, owner_a):
    with account_context(account_a):
        mine = Membership.objects.for_account(account_a).get(user=owner_a)
    response = client_a.post(f"/team/members/{mine.pk}/remove/", follow=True)
    assert "last owner cannot leave" in response.content.decode()


def test_removing_a_member_of_another_account_is_404(client_a, account_b, owner_b):
    with account_context(account_b):
        theirs = Membership.objects.for_account(account_b).get(user=owner_b)
    assert client_a.post(f"/team/members/{theirs.pk}/remove/").status_code == 404
    assert client_a.post(f"/team/members/{theirs.pk}/role/", {"role": "member"}).status_code == 404
    with account_context(account_b):
        assert Membership.objects.for_account(account_b).filter(pk=theirs.pk, role="owner").exists()


def test_api_key_is_shown_once_then_revoked(client_a, account_a):
    client_a.post("/team/api-keys/", {"name": "zapier"})
    first = client_a.get("/team/").content.decode()
    secret = re.search(r'id="new-api-key">(gw_[^<]+)<', first).group(1)
    assert '<code id="mcp-url">http://testserver/mcp</code>' in first  # where an MCP client connects with it
    assert secret not in client_a.get("/team/").content.decode()
    assert client_a.get("/api/v1/account/", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
    with account_context(account_a):
        key = ApiKey.objects.for_account(account_a).get()
    client_a.post(f"/team/api-keys/{key.pk}/revoke/")
    assert client_a.get("/api/v1/account/", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401


def test_revoking_another_accounts_key_is_404(client_a, account_b):
    from accounts.tests.factories import make_api_key

    make_api_key(account_b)
    with account_context(account_b):
        key = ApiKey.objects.for_account(account_b).get()
    assert client_a.post(f"/team/api-keys/{key.pk}/revoke/").status_code == 404
    with account_context(account_b):
        assert ApiKey.objects.for_account(account_b).get().revoked_at is None


def test_password_reset_sends_a_working_link(client, account_a, owner_a):
    client.post("/password-reset/", {"email": owner_a.email})
    assert len(mail.outbox) == 1
    link = re.search(r"http://testserver(/password-reset/\S+/)", mail.outbox[0].body).group(1)
    form = client.get(link, follow=True)
    response = client.post(
        form.redirect_chain[-1][0], {"new_password1": "A-brand-new-pass-42", "new_password2": "A-brand-new-pass-42"}
    )
    assert response.status_code == 302
    assert client.login(username=owner_a.email, password="A-brand-new-pass-42")


def test_forms_carry_csrf_tokens(client_a):
    page = client_a.get("/team/").content.decode()
    assert page.count("csrfmiddlewaretoken") >= 4
