"""Online guessing is slowed, and sign-up credits need a verified email.

Login, admin login, password reset and sign-up are limited per IP and per email address;
past the limit every attempt (even with the right password) gets a clear "too many
attempts, try again in …" page. Sign-up credits are paid once, after the email is verified.
"""

import re

import pytest
from django.core import mail
from django.test import Client

from accounts.models import Account, User
from accounts.tests.factories import PASSWORD, make_user
from billing.models import CreditLedgerEntry
from billing.selectors import balance_get
from core.tenancy import account_context

# transaction=True: the emails are sent when the transaction commits, as in production.
pytestmark = pytest.mark.django_db(transaction=True)

VERIFY = re.compile(r"http://testserver(/verify-email/[^\s/]+/)")


def _client(ip="203.0.113.7") -> Client:
    return Client(REMOTE_ADDR=ip)


def _login(client, email, password, path="/login/"):
    return client.post(path, {"username": email, "password": password})


def _refused(response) -> bool:
    body = response.content.decode()
    return response.status_code == 429 and "Too many attempts" in body and re.search(r"try again in \d+ minute", body)


def test_defaults_are_set(settings):
    for name in (
        "LOGIN_FAILURES_PER_EMAIL",
        "LOGIN_FAILURES_PER_IP",
        "PASSWORD_RESETS_PER_EMAIL",
        "PASSWORD_RESETS_PER_IP",
        "SIGNUPS_PER_IP",
        "SIGNUPS_PER_EMAIL",
    ):
        assert re.fullmatch(r"\d+/\d*(s|min|h|d)", getattr(settings, name)), name


def test_login_per_email_refuses_even_the_right_password(settings, owner_a):
    settings.LOGIN_FAILURES_PER_EMAIL = "5/15min"
    for n in range(5):
        # Each wrong password from a new IP: only the per-email limit can stop them.
        response = _login(_client(f"198.51.100.{n}"), owner_a.email, "wrong")
        assert "do not match" in response.content.decode()
    client = _client("198.51.100.99")
    response = _login(client, owner_a.email.upper(), PASSWORD)
    assert _refused(response), response.content.decode()
    assert "_auth_user_id" not in client.session
    # Another person is not locked out by it.
    other = make_user("other@example.test")
    assert _login(_client("198.51.100.99"), other.email, PASSWORD).status_code == 302


def test_login_per_ip_refuses_even_the_right_password(settings, owner_a):
    settings.LOGIN_FAILURES_PER_IP = "4/15min"
    client = _client("203.0.113.50")
    for n in range(4):
        assert "do not match" in _login(client, f"guess{n}@example.test", "wrong").content.decode()
    response = _login(client, owner_a.email, PASSWORD)
    assert _refused(response)
    assert "_auth_user_id" not in client.session
    # The same person from another address gets in.
    assert _login(_client("203.0.113.51"), owner_a.email, PASSWORD).status_code == 302


def test_a_successful_login_clears_the_email_count(settings, owner_a):
    settings.LOGIN_FAILURES_PER_EMAIL = "3/15min"
    for _ in range(2):
        _login(_client(), owner_a.email, "wrong")
    assert _login(_client(), owner_a.email, PASSWORD).status_code == 302
    for _ in range(2):
        _login(_client(), owner_a.email, "wrong")
    assert _login(_client(), owner_a.email, PASSWORD).status_code == 302


def test_admin_login_is_limited_too(settings, db):
    settings.LOGIN_FAILURES_PER_EMAIL = "3/15min"
    staff = make_user("staff@example.test", is_staff=True, is_superuser=True)
    for n in range(3):
        response = _login(_client(f"192.0.2.{n}"), staff.email, "wrong", path="/admin/login/")
        assert response.status_code == 200 and "correct" in response.content.decode()
    client = _client("192.0.2.77")
    response = _login(client, staff.email, PASSWORD, path="/admin/login/")
    assert _refused(response), response.content.decode()[:3000]
    assert "_auth_user_id" not in client.session
    # Dashboard and admin share the count: the address is locked on both.
    assert _refused(_login(_client("192.0.2.78"), staff.email, PASSWORD))


def test_password_reset_is_limited_per_email_and_per_ip(settings, owner_a):
    settings.PASSWORD_RESETS_PER_EMAIL = "2/h"
    settings.PASSWORD_RESETS_PER_IP = "3/h"
    mail.outbox.clear()
    for n in range(2):
        assert _client(f"198.51.100.{n}").post("/password-reset/", {"email": owner_a.email}).status_code == 302
    assert len(mail.outbox) == 2
    response = _client("198.51.100.9").post("/password-reset/", {"email": owner_a.email})
    assert _refused(response)
    assert len(mail.outbox) == 2
    # Per IP, whatever the address (unknown addresses count too: no way to probe around it).
    client = _client("198.51.100.20")
    for n in range(3):
        assert client.post("/password-reset/", {"email": f"x{n}@example.test"}).status_code == 302
    assert _refused(client.post("/password-reset/", {"email": "y@example.test"}))


def test_signup_is_limited_per_ip(settings, db):
    settings.SIGNUPS_PER_IP = "3/h"
    client = _client("203.0.113.80")
    for n in range(3):
        response = client.post("/signup/", {"email": f"new{n}@example.test", "password": PASSWORD})
        assert response.status_code == 302
        client.post("/logout/")
    response = client.post("/signup/", {"email": "new9@example.test", "password": PASSWORD})
    assert _refused(response)
    assert not User.objects.filter(email="new9@example.test").exists()
    assert (
        _client("203.0.113.81").post("/signup/", {"email": "new9@example.test", "password": PASSWORD}).status_code
        == 302
    )


def test_signup_is_limited_per_email(settings, account_a, owner_a):
    """Probing whether an address has an account ("already exists") is limited too."""
    settings.SIGNUPS_PER_EMAIL = "2/h"
    for n in range(2):
        response = _client(f"192.0.2.{n}").post("/signup/", {"email": owner_a.email, "password": PASSWORD})
        assert "already exists" in response.content.decode()
    assert _refused(_client("192.0.2.50").post("/signup/", {"email": owner_a.email, "password": PASSWORD}))


def _balance(account):
    with account_context(account):
        return balance_get(account=account)


def test_signup_credits_only_after_the_email_is_verified_and_once(settings, db):
    mail.outbox.clear()
    client = _client()
    response = client.post("/signup/", {"email": "ann@example.test", "password": PASSWORD, "account_name": "Ann Co"})
    assert response.status_code == 302
    account = Account.objects.get(name="Ann Co")
    assert _balance(account) == 0
    home = client.get("/").content.decode()
    assert "Verify your email to receive your starting credits" in home
    # The account works before: pages open, the team can be managed.
    assert client.get("/team/").status_code == 200
    [message] = [m for m in mail.outbox if m.to == ["ann@example.test"]]
    link = VERIFY.search(message.body).group(1)

    response = client.get(link)
    assert response.status_code == 302
    assert _balance(account) == settings.SIGNUP_CREDITS
    assert "Verify your email" not in client.get("/").content.decode()
    # Following it again (or from another browser) pays nothing more.
    assert client.get(link).status_code == 302
    assert _client("192.0.2.9").get(link).status_code == 200
    assert _balance(account) == settings.SIGNUP_CREDITS
    with account_context(account):
        assert CreditLedgerEntry.objects.for_account(account).filter(kind="signup").count() == 1


def test_a_forged_or_expired_verification_link_pays_nothing(settings, db):
    from django.core import signing

    client = _client()
    client.post("/signup/", {"email": "bo@example.test", "password": PASSWORD, "account_name": "Bo Co"})
    account = Account.objects.get(name="Bo Co")
    user = User.objects.get(email="bo@example.test")
    forged = signing.dumps({"u": user.pk, "e": user.email}, key="not-our-key", salt="accounts.verify-email")
    response = client.get(f"/verify-email/{forged}/")
    assert response.status_code == 404 and "not valid" in response.content.decode()
    settings.EMAIL_VERIFICATION_MAX_AGE_DAYS = -1
    link = VERIFY.search(mail.outbox[-1].body).group(1)
    response = client.get(link)
    assert response.status_code == 410 and "expired" in response.content.decode()
    assert _balance(account) == 0
    # A fresh link can be asked for.
    settings.EMAIL_VERIFICATION_MAX_AGE_DAYS = 3
    mail.outbox.clear()
    assert client.post("/verify-email/resend/").status_code == 302
    client.get(VERIFY.search(mail.outbox[-1].body).group(1))
    assert _balance(account) == settings.SIGNUP_CREDITS


def test_an_unverified_user_gets_no_credits_by_creating_more_teams(settings, db):
    client = _client()
    client.post("/signup/", {"email": "cy@example.test", "password": PASSWORD, "account_name": "Cy Co"})
    client.post("/accounts/new/", {"name": "Second"})
    assert _balance(Account.objects.get(name="Second")) == 0
