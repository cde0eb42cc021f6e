"""Support staff see across accounts through the explicit bypass; others never reach it."""

from accounts.models import ApiKey
from accounts.tests.factories import make_api_key, make_user
from core.tenancy import account_context


def _staff(client):
    staff = make_user("support@groundwork.test", is_staff=True, is_superuser=True)
    client.force_login(staff)
    return staff


def test_staff_see_every_accounts_members_and_keys(client, account_a, account_b, owner_a, owner_b):
    make_api_key(account_a, name="alpha-key")
    make_api_key(account_b, name="beta-key")
    _staff(client)
    memberships = client.get("/admin/accounts/membership/").content.decode()
    assert owner_a.email in memberships and owner_b.email in memberships
    keys = client.get("/admin/accounts/apikey/").content.decode()
    assert "alpha-key" in keys and "beta-key" in keys
    account_page = client.get(f"/admin/accounts/account/{account_a.pk}/change/").content.decode()
    assert owner_a.email in account_page  # members inline


def test_revoke_action(client, account_a):
    raw = make_api_key(account_a)
    _staff(client)
    with account_context(account_a):
        key = ApiKey.objects.for_account(account_a).get()
    response = client.post("/admin/accounts/apikey/", {"action": "revoke", "_selected_action": [key.pk]}, follow=True)
    assert "Revoked 1 API key" in response.content.decode()
    assert client.get("/api/v1/account/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_non_staff_never_reach_the_admin(client, account_a, owner_a):
    client.force_login(owner_a)
    response = client.get("/admin/accounts/membership/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert client.get("/admin/").status_code == 302
