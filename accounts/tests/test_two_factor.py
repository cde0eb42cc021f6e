"""Two-factor sign-in: set-up with a code from the app, recovery codes (once each), the
sign-in's second step, its rate limit, and turning it off."""

import re
import time
from base64 import b32decode

from django.test import Client
from django_otp.oath import TOTP

from accounts.tests.factories import PASSWORD
from audit.models import AuditEntry
from core.tenancy import account_context

SECRET = re.compile(r'id="totp-secret">([A-Z2-7]+)<')
CODES = re.compile(r"<li><code>([a-z2-9]{5}-[a-z2-9]{5})</code></li>")


def code_for(secret: str, steps_ahead: int = 0) -> str:
    """What an authenticator app shows for `secret` (RFC 6238, 30 s steps, 6 digits)."""
    totp = TOTP(b32decode(secret))
    totp.time = time.time() + 30 * steps_ahead
    return f"{totp.token():06d}"


def turn_on(client) -> tuple[str, list[str]]:
    assert client.post("/settings/two-factor/setup/").status_code == 302
    page = client.get("/settings/").content.decode()
    secret = SECRET.search(page).group(1)
    assert client.post("/settings/two-factor/confirm/", {"code": code_for(secret)}).status_code == 302
    codes = CODES.findall(client.get("/settings/").content.decode())
    return secret, codes


def password_step(user) -> Client:
    browser = Client()
    response = browser.post("/login/", {"username": user.email, "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/login/code/"
    return browser


def _signed_in(browser) -> bool:
    return browser.get("/settings/").status_code == 200


def _actions(account, action):
    with account_context(account):
        return AuditEntry.objects.for_account(account).filter(action=action).count()


def test_set_up_shows_a_qr_code_and_secret_and_needs_the_right_code(client_a, owner_a, account_a):
    assert "Set up two-factor sign-in" in client_a.get("/settings/").content.decode()
    client_a.post("/settings/two-factor/setup/")
    page = client_a.get("/settings/").content.decode()
    assert "<svg" in page and 'class="segno"' in page  # drawn inline: no image is fetched
    secret = SECRET.search(page).group(1)
    wrong = client_a.post(
        "/settings/two-factor/confirm/", {"code": "000000" if code_for(secret) != "000000" else "111111"}
    )
    assert wrong.status_code == 400 and "That code is not right" in wrong.content.decode()
    assert 'id="two-factor-status">Off' not in wrong.content.decode() and "Turn on" in wrong.content.decode()
    assert client_a.post("/settings/two-factor/confirm/", {"code": code_for(secret)}).status_code == 302
    page = client_a.get("/settings/").content.decode()
    assert 'id="two-factor-status">On' in page
    codes = CODES.findall(page)
    assert len(codes) == 10 and len(set(codes)) == 10
    assert _actions(account_a, "user.two_factor_enable") == 1


def test_recovery_codes_download_as_text_until_saved(client_a):
    _, codes = turn_on(client_a)
    download = client_a.get("/settings/two-factor/recovery-codes.txt")
    assert download.status_code == 200 and download["Content-Type"].startswith("text/plain")
    assert "attachment" in download["Content-Disposition"]
    assert all(c in download.content.decode() for c in codes)
    client_a.post("/settings/two-factor/recovery-codes/saved/")
    assert CODES.findall(client_a.get("/settings/").content.decode()) == []
    assert client_a.get("/settings/two-factor/recovery-codes.txt").status_code == 404


def test_password_sign_in_asks_for_a_code_before_the_session_is_signed_in(client_a, owner_a):
    secret, _ = turn_on(client_a)
    browser = password_step(owner_a)
    assert not _signed_in(browser)  # the password alone signs nothing in
    wrong = browser.post("/login/code/", {"code": "12345"})
    assert wrong.status_code == 400 and "That code is not right" in wrong.content.decode()
    assert not _signed_in(browser)
    # The code of the set-up's step is used; the app's next one signs in.
    response = browser.post("/login/code/", {"code": code_for(secret, steps_ahead=1)})
    assert response.status_code == 302 and response["Location"] == "/"
    assert _signed_in(browser)
    assert "_auth_user_id" in browser.session and "otp_device_id" in browser.session


def test_a_code_cannot_be_used_twice(client_a, owner_a):
    secret, _ = turn_on(client_a)
    code = code_for(secret, steps_ahead=1)
    first = password_step(owner_a)
    assert first.post("/login/code/", {"code": code}).status_code == 302
    second = password_step(owner_a)
    assert second.post("/login/code/", {"code": code}).status_code == 400
    assert not _signed_in(second)


def test_a_recovery_code_works_once(client_a, owner_a):
    _, codes = turn_on(client_a)
    browser = password_step(owner_a)
    response = browser.post("/login/code/", {"code": codes[3].upper().replace("-", " ")})  # as typed from paper
    assert response.status_code == 302 and _signed_in(browser)
    again = password_step(owner_a)
    refused = again.post("/login/code/", {"code": codes[3]})
    assert refused.status_code == 400 and not _signed_in(again)
    assert again.post("/login/code/", {"code": codes[4]}).status_code == 302


def test_code_attempts_are_rate_limited_the_right_code_included(client_a, owner_a, settings):
    settings.TWO_FACTOR_FAILURES_PER_USER = "3/15min"
    secret, _ = turn_on(client_a)
    browser = password_step(owner_a)
    for _ in range(3):
        assert browser.post("/login/code/", {"code": "999999"}).status_code == 400
    limited = browser.post("/login/code/", {"code": code_for(secret, steps_ahead=1)})
    assert limited.status_code == 429 and "Too many attempts" in limited.content.decode()
    assert not _signed_in(browser)


def test_the_code_step_needs_a_fresh_password_step(client_a, owner_a):
    secret, _ = turn_on(client_a)
    assert Client().get("/login/code/")["Location"] == "/login/"
    browser = password_step(owner_a)
    # The password changed since (in the signed-in session): the waiting step is void.
    client_a.post("/settings/password/", {"current_password": PASSWORD, "new_password": "another-long-passphrase"})
    response = browser.post("/login/code/", {"code": code_for(secret, steps_ahead=1)})
    assert response["Location"] == "/login/" and not _signed_in(browser)


def test_new_recovery_codes_replace_the_old_ones(client_a, owner_a, account_a):
    secret, old = turn_on(client_a)
    assert client_a.post("/settings/two-factor/recovery-codes/", {"code": old[0]}).status_code == 302
    new = CODES.findall(client_a.get("/settings/").content.decode())
    assert len(new) == 10 and not set(new) & set(old)
    assert password_step(owner_a).post("/login/code/", {"code": old[1]}).status_code == 400
    assert password_step(owner_a).post("/login/code/", {"code": new[0]}).status_code == 302
    assert _actions(account_a, "user.recovery_codes") == 1


def test_turning_it_off_needs_a_code_or_the_password(client_a, owner_a, account_a):
    _, codes = turn_on(client_a)
    nothing = client_a.post("/settings/two-factor/off/", {})
    assert nothing.status_code == 400 and "to turn two-factor sign-in off" in nothing.content.decode()
    wrong = client_a.post("/settings/two-factor/off/", {"password": "wrong"})
    assert wrong.status_code == 400 and "not your current password" in wrong.content.decode()
    assert client_a.post("/settings/two-factor/off/", {"code": codes[0]}).status_code == 302
    assert 'id="two-factor-status">Off' in client_a.get("/settings/").content.decode()
    assert _actions(account_a, "user.two_factor_disable") == 1
    # The password alone signs in again.
    assert Client().post("/login/", {"username": owner_a.email, "password": PASSWORD})["Location"] == "/"
    turn_on(client_a)
    assert client_a.post("/settings/two-factor/off/", {"password": PASSWORD}).status_code == 302


def test_people_without_two_factor_sign_in_with_the_password_alone(client, owner_a):
    response = client.post("/login/", {"username": owner_a.email, "password": PASSWORD})
    assert response["Location"] == "/" and _signed_in(client)


def test_a_second_set_up_while_on_is_refused(client_a):
    turn_on(client_a)
    client_a.post("/settings/two-factor/setup/")
    page = client_a.get("/settings/").content.decode()
    assert "already on" in page and 'id="two-factor-status">On' in page


def test_the_admin_sign_in_does_not_skip_the_code(owner_a):
    owner_a.is_staff = True
    owner_a.save(update_fields=["is_staff"])
    browser = Client()
    browser.force_login(owner_a)
    secret, _ = turn_on(browser)
    staff = Client()
    refused = staff.post("/admin/login/", {"username": owner_a.email, "password": PASSWORD})
    assert refused.status_code == 200 and "log in at /login/ with your code" in refused.content.decode()
    assert "_auth_user_id" not in staff.session
    # Through the dashboard's sign-in with the code, /admin/ opens.
    step = password_step(owner_a)
    step.post("/login/code/", {"code": code_for(secret, steps_ahead=1)})
    assert step.get("/admin/").status_code == 200


def test_an_operator_turns_it_off_for_a_person_who_lost_everything(client_a, owner_a, account_a):
    from io import StringIO

    import pytest
    from django.contrib import admin
    from django.core.management import CommandError, call_command
    from django_otp.plugins.otp_totp.models import TOTPDevice

    turn_on(client_a)
    assert not admin.site.is_registered(TOTPDevice)  # support never sees a secret
    out = StringIO()
    call_command("two_factor_off", owner_a.email.upper(), stdout=out)
    assert "is off for owner@acme.test" in out.getvalue()
    assert Client().post("/login/", {"username": owner_a.email, "password": PASSWORD})["Location"] == "/"
    with account_context(account_a):
        entry = AuditEntry.objects.for_account(account_a).get(action="user.two_factor_disable")
    assert entry.detail == {"by": "operator"} and entry.actor_kind == "system"
    call_command("two_factor_off", owner_a.email, stdout=out)
    assert "was not on" in out.getvalue()
    with pytest.raises(CommandError):
        call_command("two_factor_off", "nobody@x.test")
