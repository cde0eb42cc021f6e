"""Staff cannot take over a superuser. Found from outside: staff with only "change user" set a
superuser's password in the admin, signed in as them and reached /admin/auth/group/add/;
the same path took over any team owner. Setting another person's password or email needs
the superuser or the dedicated permission `accounts.set_user_credentials` (which no support
role has by default), and never works on someone with more rights than the actor."""

import pytest

from accounts.tests.factories import PASSWORD, make_account, make_user, staff_with

pytestmark = pytest.mark.django_db

NEW = "a-new-password-nobody-knows-9"


def _set_password(client, target):
    return client.post(
        f"/admin/accounts/user/{target.pk}/password/", {"password1": NEW, "password2": NEW, "usable_password": "true"}
    )


def _change_email(client, target, email):
    return client.post(
        f"/admin/accounts/user/{target.pk}/change/",
        {
            "email": email,
            "full_name": target.full_name,
            "is_active": "on",
            "last_login_0": "",
            "last_login_1": "",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
    )


def test_change_user_alone_cannot_set_a_superusers_password(client):
    root = make_user("root@groundwork.test", is_staff=True, is_superuser=True)
    client.force_login(staff_with("accounts.view_user", "accounts.change_user"))
    assert client.get(f"/admin/accounts/user/{root.pk}/password/").status_code == 403
    assert _set_password(client, root).status_code == 403
    root.refresh_from_db()
    assert root.check_password(PASSWORD) and not root.check_password(NEW)
    assert client.login(email=root.email, password=NEW) is False


def test_change_user_alone_cannot_take_over_a_team_owner(client):
    account = make_account("Acme")
    owner = account.test_owner
    client.force_login(staff_with("accounts.view_user", "accounts.change_user"))
    assert _set_password(client, owner).status_code == 403
    _change_email(client, owner, "attacker@evil.test")
    owner.refresh_from_db()
    assert owner.check_password(PASSWORD) and owner.email != "attacker@evil.test"


def test_the_dedicated_permission_sets_an_ordinary_users_password_but_never_a_superiors(client):
    owner = make_account("Acme").test_owner
    root = make_user("root@groundwork.test", is_staff=True, is_superuser=True)
    lead = staff_with("accounts.view_user", "accounts.change_user", "accounts.set_user_credentials")
    client.force_login(lead)
    assert _set_password(client, owner).status_code == 302
    owner.refresh_from_db()
    assert owner.check_password(NEW)
    assert _set_password(client, root).status_code == 403
    # a staff member with rights the actor lacks is a superior too
    other = staff_with("accounts.view_user", "accounts.change_user", "accounts.delete_user")
    assert _set_password(client, other).status_code == 403
    _change_email(client, root, "attacker@evil.test")
    root.refresh_from_db()
    assert root.email == "root@groundwork.test" and root.check_password(PASSWORD)


def test_a_superuser_sets_anyones_password_and_staff_their_own(client):
    owner = make_account("Acme").test_owner
    client.force_login(make_user("root@groundwork.test", is_staff=True, is_superuser=True))
    assert _set_password(client, owner).status_code == 302
    owner.refresh_from_db()
    assert owner.check_password(NEW)
    staff = staff_with("accounts.view_user", "accounts.change_user")
    client.force_login(staff)
    assert _set_password(client, staff).status_code == 302
    staff.refresh_from_db()
    assert staff.check_password(NEW)
