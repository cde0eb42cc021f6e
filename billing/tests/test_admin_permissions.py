"""Every admin action needs its own permission and is recorded with the
staff user who ran it. A staff user with view rights only used to mint credits with
"Grant credits" (an action without `permissions=` is offered to anyone who may see the list)."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType

from accounts.models import Account, ApiKey
from accounts.tests.factories import make_api_key, staff_with
from billing.models import AccountBalance, CreditLedgerEntry, Kind
from core.tenancy import account_context

pytestmark = pytest.mark.django_db


def balance(account) -> int:
    with account_context(account):
        return AccountBalance.objects.for_account(account).get().balance


def grant(client, account, amount=1_000_000, reason="goodwill"):
    return client.post(
        "/admin/accounts/account/",
        {"action": "grant_credits", "_selected_action": [account.pk], "apply": "1", "amount": amount, "reason": reason},
        follow=True,
    )


def test_view_only_staff_cannot_grant_credits(client, account_a):
    before = balance(account_a)
    client.force_login(staff_with("accounts.view_account"))
    assert client.get("/admin/accounts/account/").status_code == 200
    response = grant(client, account_a)
    assert response.status_code == 200
    assert balance(account_a) == before
    assert "Grant credits" not in client.get("/admin/accounts/account/").content.decode()


def test_change_rights_on_accounts_are_not_enough_to_grant(client, account_a):
    before = balance(account_a)
    client.force_login(staff_with("accounts.view_account", "accounts.change_account"))
    grant(client, account_a)
    assert balance(account_a) == before


def test_grant_permission_grants_and_records_the_staff_user(client, account_a):
    before = balance(account_a)
    staff = staff_with("accounts.view_account", "billing.grant_credits")
    client.force_login(staff)
    assert "Grant credits" in client.get("/admin/accounts/account/").content.decode()
    response = grant(client, account_a, amount=5_000, reason="annual plan")
    assert "Granted 5,000 credits" in response.content.decode()
    assert balance(account_a) == before + 5_000
    with account_context(account_a):
        entry = CreditLedgerEntry.objects.for_account(account_a).filter(kind=Kind.GRANT).latest("created_at")
    assert (entry.delta, entry.created_by_id, entry.metadata["reason"]) == (5_000, staff.pk, "annual plan")
    log = LogEntry.objects.get(user=staff, content_type=ContentType.objects.get_for_model(Account))
    assert log.object_id == str(account_a.pk) and "Grant credits" in log.get_change_message()
    assert "5,000" in log.get_change_message() and "annual plan" in log.get_change_message()


def test_grant_form_without_the_permission_is_not_shown_either(client, account_a):
    client.force_login(staff_with("accounts.view_account"))
    response = client.post(
        "/admin/accounts/account/", {"action": "grant_credits", "_selected_action": [account_a.pk]}, follow=True
    )
    assert "Grant credits to:" not in response.content.decode()


def _key(account):
    with account_context(account):
        return ApiKey.objects.for_account(account).get()


def test_view_only_staff_cannot_revoke_keys(client, account_a):
    raw = make_api_key(account_a)
    key = _key(account_a)
    client.force_login(staff_with("accounts.view_apikey"))
    client.post("/admin/accounts/apikey/", {"action": "revoke", "_selected_action": [key.pk]}, follow=True)
    assert _key(account_a).revoked_at is None
    # nor through the key page's button
    assert client.post(f"/admin/accounts/apikey/{key.pk}/revoke/").status_code == 403
    assert _key(account_a).revoked_at is None
    assert client.get("/api/v1/account/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200


def test_revoke_with_change_rights_is_recorded(client, account_a):
    make_api_key(account_a)
    key = _key(account_a)
    staff = staff_with("accounts.view_apikey", "accounts.change_apikey")
    client.force_login(staff)
    response = client.post("/admin/accounts/apikey/", {"action": "revoke", "_selected_action": [key.pk]}, follow=True)
    assert "Revoked 1 API key" in response.content.decode()
    assert _key(account_a).revoked_at is not None
    log = LogEntry.objects.get(user=staff, content_type=ContentType.objects.get_for_model(ApiKey))
    assert log.object_id == str(key.pk) and "Revoke" in log.get_change_message()


def test_every_admin_action_declares_its_permissions():
    """No action reachable with view rights alone: each names the permission it needs, and
    its admin answers for that permission."""
    from django.contrib import admin

    unguarded = []
    for model, model_admin in admin.site._registry.items():
        for action in model_admin.actions or []:
            func = getattr(model_admin, action) if isinstance(action, str) else action
            perms = getattr(func, "allowed_permissions", ())
            if not perms or perms == ("view",):
                unguarded.append(f"{model.__name__}.{getattr(func, '__name__', action)}")
            for perm in perms:
                assert hasattr(model_admin, f"has_{perm}_permission"), (model, action, perm)
    assert unguarded == []
