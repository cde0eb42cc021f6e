"""The "Your settings" page: name, email change with verification, password, signing out
other sessions; every change audited, bad input refused with its reason and nothing written."""

import re

import pytest
from django.contrib.sessions.models import Session
from django.core import mail, signing
from django.test import Client

from accounts.models import User
from accounts.tests.factories import PASSWORD, add_member, make_user
from audit.models import AuditEntry
from core.tenancy import account_context

CHANGE_LINK = re.compile(r"http://testserver(/settings/email/confirm/[^\s/]+/)")
NEW_PASSWORD = "a-brand-new-long-passphrase"


def _actions(account, action):
    with account_context(account):
        return list(AuditEntry.objects.for_account(account).filter(action=action))


def _signed_in(user) -> Client:
    other = Client()
    assert other.post("/login/", {"username": user.email, "password": PASSWORD}).status_code == 302
    assert other.get("/settings/").status_code == 200
    return other


def test_the_page_is_for_signed_in_people_and_linked_in_the_header(client, client_a):
    assert Client().get("/settings/")["Location"].startswith("/login/")
    page = client_a.get("/").content.decode()
    assert 'href="/settings/"' in page
    assert "Your settings" in client_a.get("/settings/").content.decode()


def test_a_person_changes_their_name_and_it_is_audited(client_a, owner_a, account_a, account_b):
    add_member(account_b, user=owner_a)
    response = client_a.post("/settings/name/", {"full_name": "  Ada Lovelace "})
    assert response.status_code == 302
    owner_a.refresh_from_db()
    assert owner_a.full_name == "Ada Lovelace"
    # In every team of theirs: each team's log says their member changed their name.
    for account in (account_a, account_b):
        [entry] = _actions(account, "user.name_change")
        assert entry.detail == {"from": "", "to": "Ada Lovelace"}


def test_a_name_with_a_line_break_is_refused(client_a, owner_a):
    response = client_a.post("/settings/name/", {"full_name": "Ada\nBcc: evil"})
    assert response.status_code == 400
    assert "line breaks" in response.content.decode()
    owner_a.refresh_from_db()
    assert owner_a.full_name == ""


def _request_change(client, new_email, password=PASSWORD, capture=None):
    with capture(execute=True):
        return client.post("/settings/email/", {"new_email": new_email, "password": password})


def test_email_changes_only_when_the_link_to_the_new_address_is_opened(
    client_a, owner_a, account_a, django_capture_on_commit_callbacks
):
    response = _request_change(client_a, "Ada@New.test", capture=django_capture_on_commit_callbacks)
    assert response.status_code == 302
    [sent] = mail.outbox
    assert sent.to == ["ada@new.test"]
    owner_a.refresh_from_db()
    assert owner_a.email == "owner@acme.test"  # nothing yet
    link = CHANGE_LINK.search(sent.body).group(1)
    with django_capture_on_commit_callbacks(execute=True):
        opened = client_a.get(link)
    assert opened.status_code == 302 and opened["Location"] == "/settings/"
    owner_a.refresh_from_db()
    assert owner_a.email == "ada@new.test" and owner_a.email_verified_at is not None
    # The old address is told.
    [notice] = [m for m in mail.outbox if m.to == ["owner@acme.test"]]
    assert "ada@new.test" in notice.body
    [entry] = _actions(account_a, "user.email_change")
    assert entry.detail == {"from": "owner@acme.test", "to": "ada@new.test"}
    # A used link changes nothing and says so.
    again = client_a.get(link)
    assert again.status_code == 410 and "used already" in again.content.decode()
    # They sign in with the new address now, and not with the old one.
    assert Client().post("/login/", {"username": "ada@new.test", "password": PASSWORD}).status_code == 302
    assert Client().post("/login/", {"username": "owner@acme.test", "password": PASSWORD}).status_code == 200


def test_a_change_link_works_once_even_after_the_address_comes_back(
    client_a, owner_a, django_capture_on_commit_callbacks
):
    _request_change(client_a, "b@new.test", capture=django_capture_on_commit_callbacks)
    to_b = CHANGE_LINK.search(mail.outbox[-1].body).group(1)
    with django_capture_on_commit_callbacks(execute=True):
        assert client_a.get(to_b).status_code == 302
    _request_change(client_a, "owner@acme.test", capture=django_capture_on_commit_callbacks)
    back_to_a = CHANGE_LINK.search(mail.outbox[-1].body).group(1)
    with django_capture_on_commit_callbacks(execute=True):
        assert client_a.get(back_to_a).status_code == 302
    owner_a.refresh_from_db()
    assert owner_a.email == "owner@acme.test"
    # The address is A again, as when the first link was made: that link is still used.
    again = client_a.get(to_b)
    assert again.status_code == 410 and "used already" in again.content.decode()
    owner_a.refresh_from_db()
    assert owner_a.email == "owner@acme.test"


def test_a_second_change_link_is_void_once_another_was_used(client_a, owner_a, django_capture_on_commit_callbacks):
    _request_change(client_a, "c@new.test", capture=django_capture_on_commit_callbacks)
    to_c = CHANGE_LINK.search(mail.outbox[-1].body).group(1)
    _request_change(client_a, "d@new.test", capture=django_capture_on_commit_callbacks)
    to_d = CHANGE_LINK.search(mail.outbox[-1].body).group(1)
    with django_capture_on_commit_callbacks(execute=True):
        assert client_a.get(to_d).status_code == 302
    assert client_a.get(to_c).status_code == 410
    owner_a.refresh_from_db()
    assert owner_a.email == "d@new.test"


def test_an_address_of_another_user_is_refused(client_a, owner_a, owner_b, django_capture_on_commit_callbacks):
    response = _request_change(client_a, owner_b.email.upper(), capture=django_capture_on_commit_callbacks)
    assert response.status_code == 400
    assert "Another user already has that address" in response.content.decode()
    assert mail.outbox == []


def test_an_address_taken_after_the_link_was_sent_is_refused(client_a, owner_a, django_capture_on_commit_callbacks):
    _request_change(client_a, "late@new.test", capture=django_capture_on_commit_callbacks)
    link = CHANGE_LINK.search(mail.outbox[0].body).group(1)
    make_user("late@new.test")
    response = client_a.get(link)
    assert response.status_code == 409
    owner_a.refresh_from_db()
    assert owner_a.email == "owner@acme.test"


def test_email_change_needs_the_current_password(client_a, owner_a, django_capture_on_commit_callbacks):
    response = _request_change(client_a, "x@new.test", password="wrong", capture=django_capture_on_commit_callbacks)
    assert response.status_code == 400 and "not your current password" in response.content.decode()
    assert mail.outbox == []


@pytest.mark.parametrize("bad", ["", "not-an-email", "owner@acme.test"])
def test_email_change_bad_input_is_refused(client_a, owner_a, bad, django_capture_on_commit_callbacks):
    response = _request_change(client_a, bad, capture=django_capture_on_commit_callbacks)
    assert response.status_code == 400
    assert mail.outbox == []


def test_a_forged_or_foreign_change_link_is_refused(client_a, owner_a, owner_b):
    forged = signing.dumps(
        {"u": owner_a.pk, "o": owner_a.email, "e": "evil@x.test"}, key="nope", salt="accounts.change-email"
    )
    assert client_a.get(f"/settings/email/confirm/{forged}/").status_code == 404
    # A verification link is not a change link (another salt).
    verify = signing.dumps({"u": owner_a.pk, "e": "evil@x.test"}, salt="accounts.verify-email")
    assert client_a.get(f"/settings/email/confirm/{verify}/").status_code == 404
    owner_a.refresh_from_db()
    assert owner_a.email == "owner@acme.test"


def test_password_change_keeps_this_session_and_ends_the_others(client_a, owner_a, account_a):
    # client_a was signed in with force_login; a second browser signs in with the password.
    other = _signed_in(owner_a)
    response = client_a.post("/settings/password/", {"current_password": PASSWORD, "new_password": NEW_PASSWORD})
    assert response.status_code == 302
    assert client_a.get("/settings/").status_code == 200
    assert other.get("/settings/").status_code == 302
    assert Client().post("/login/", {"username": owner_a.email, "password": NEW_PASSWORD}).status_code == 302
    assert len(_actions(account_a, "user.password_change")) == 1


def test_password_change_refuses_a_wrong_current_password_and_a_weak_new_one(client_a, owner_a):
    wrong = client_a.post("/settings/password/", {"current_password": "nope", "new_password": NEW_PASSWORD})
    assert wrong.status_code == 400 and "not your current password" in wrong.content.decode()
    weak = client_a.post("/settings/password/", {"current_password": PASSWORD, "new_password": "12345678"})
    assert weak.status_code == 400
    assert "too common" in weak.content.decode() or "entirely numeric" in weak.content.decode()
    owner_a.refresh_from_db()
    assert owner_a.check_password(PASSWORD)


def test_sign_out_other_sessions(client_a, owner_a, account_a):
    other, third = _signed_in(owner_a), _signed_in(owner_a)
    someone_else = make_user()
    bystander = _signed_in(someone_else)
    assert client_a.post("/settings/sessions/end/").status_code == 302
    assert client_a.get("/settings/").status_code == 200
    assert other.get("/settings/").status_code == 302
    assert third.get("/settings/").status_code == 302
    assert bystander.get("/settings/").status_code == 200
    owner_a.refresh_from_db()
    assert owner_a.session_epoch == 1
    assert len(_actions(account_a, "user.sessions_end")) == 1
    # Signing in again works, and a second sign-out-others ends that one too.
    again = _signed_in(owner_a)
    client_a.post("/settings/sessions/end/")
    assert again.get("/settings/").status_code == 302 and client_a.get("/settings/").status_code == 200


def test_sessions_made_before_the_epoch_existed_stay_signed_in(client, owner_a):
    """Epoch 0 keeps Django's own session hash: deploying the field signed nobody out."""
    client.force_login(owner_a)
    stored = Session.objects.get(session_key=client.session.session_key).get_decoded()
    from django.contrib.auth.base_user import AbstractBaseUser

    assert stored["_auth_user_hash"] == AbstractBaseUser.get_session_auth_hash(User.objects.get(pk=owner_a.pk))
    assert client.get("/settings/").status_code == 200


def test_settings_pages_only_change_the_signed_in_person(client_a, owner_a, owner_b):
    """Nothing posted names another person: a posted id or email is ignored."""
    client_a.post("/settings/name/", {"full_name": "Changed", "user_id": owner_b.pk, "email": owner_b.email})
    owner_b.refresh_from_db()
    assert owner_b.full_name == "" and User.objects.get(pk=owner_a.pk).full_name == "Changed"


def test_guessing_the_current_password_is_rate_limited(client_a, owner_a, settings):
    settings.LOGIN_FAILURES_PER_EMAIL = "3/15min"
    for _ in range(3):
        assert (
            client_a.post(
                "/settings/password/", {"current_password": "guess", "new_password": NEW_PASSWORD}
            ).status_code
            == 400
        )
    limited = client_a.post("/settings/password/", {"current_password": PASSWORD, "new_password": NEW_PASSWORD})
    assert limited.status_code == 429 and "Too many attempts" in limited.content.decode()
    owner_a.refresh_from_db()
    assert owner_a.check_password(PASSWORD)
