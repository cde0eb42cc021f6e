"""The API, commands, admin and sweeper of billing."""

import datetime as dt
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from accounts.tests.factories import make_api_key, make_user
from billing.jobs import release_stale_holds
from billing.models import CreditHold, CreditLedgerEntry, HoldStatus
from billing.selectors import balance_get
from billing.services import credits_debit, credits_hold
from core.tenancy import account_context


def _bearer(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def test_credits_api_shows_balance_and_entries_newest_first(client, account_a, account_b):
    with account_context(account_a):
        for i in range(3):
            credits_debit(account=account_a, tokens=10 + i, key=f"k{i}", kind="chat", reference=f"message:{i}")
    body = client.get("/api/v1/credits/", **_bearer(make_api_key(account_a))).json()
    assert body["balance"] == 10000 - 33
    assert [e["delta"] for e in body["entries"]] == [-12, -11, -10, 10000]
    assert set(body["entries"][0]) >= {"delta", "kind", "tokens", "created_at", "reference"}
    assert body["entries"][0]["reference"] == "message:2" and body["next"] is None


def test_credits_api_paginates(client, account_a):
    with account_context(account_a):
        for i in range(5):
            credits_debit(account=account_a, tokens=1, key=f"p{i}", kind="chat")
    key = make_api_key(account_a)
    page = client.get("/api/v1/credits/?page_size=4", **_bearer(key)).json()
    assert len(page["entries"]) == 4 and page["next"]
    rest = client.get(page["next"], **_bearer(key)).json()
    assert len(rest["entries"]) == 2 and rest["balance"] == page["balance"]


def test_credits_api_is_isolated(client, account_a, account_b):
    with account_context(account_a):
        credits_debit(account=account_a, tokens=99, key="secret", kind="chat", reference="message:secret")
    body = client.get("/api/v1/credits/", **_bearer(make_api_key(account_b))).json()
    assert body["balance"] == 10000
    assert all(e["reference"] != "message:secret" for e in body["entries"])


def test_insufficient_credits_maps_to_402(account_a):
    from billing.errors import InsufficientCredits
    from core.api import exception_handler

    response = exception_handler(InsufficientCredits(needed=50, balance=3), {})
    assert response.status_code == 402
    assert response.data == {
        "error": {
            "code": "insufficient_credits",
            "message": "This needs about 50 credits; the account has 3. An owner can add credits.",
        }
    }


def test_create_account_with_credits(db):
    out = StringIO()
    call_command("create_account", "Paid", "--owner", "p@x.test", "--credits", "500", "--json", stdout=out)
    assert json.loads(out.getvalue())["balance"] == 500
    with pytest.raises(CommandError, match="zero or more"):
        call_command("create_account", "Neg", "--owner", "n@x.test", "--credits", "-1")


def test_grant_credits_command(account_a):
    out = StringIO()
    call_command("grant_credits", str(account_a.pk), "250", "--reason", "annual plan", stdout=out)
    assert "Balance: 10,250" in out.getvalue()
    with account_context(account_a):
        entry = CreditLedgerEntry.objects.for_account(account_a).filter(kind="grant").get()
    assert entry.metadata["reason"] == "annual plan"


@pytest.mark.parametrize(
    "args, message",
    [
        (["999999", "10", "--reason", "x"], "No account"),
        (["{a}", "0", "--reason", "x"], "greater than zero"),
        (["{a}", "-3", "--reason", "x"], "greater than zero"),
        (["{a}", "10", "--reason", " "], "needs a reason"),
    ],
)
def test_grant_credits_bad_input(account_a, args, message):
    args = [a.format(a=account_a.pk) for a in args]
    with pytest.raises(CommandError, match=message):
        call_command("grant_credits", *args)
    with account_context(account_a):
        assert balance_get(account=account_a) == 10000


def test_admin_grant_action_records_the_staff_user(client, account_a):
    staff = make_user("staff@groundwork.test", is_staff=True, is_superuser=True)
    client.force_login(staff)
    url = "/admin/accounts/account/"
    page = client.post(url, {"action": "grant_credits", "_selected_action": [account_a.pk]})
    assert page.status_code == 200 and b"Grant credits" in page.content
    done = client.post(
        url,
        {
            "action": "grant_credits",
            "_selected_action": [account_a.pk],
            "apply": "1",
            "amount": "1234",
            "reason": "goodwill",
        },
        follow=True,
    )
    assert "Granted 1,234 credits" in done.content.decode()
    with account_context(account_a):
        entry = CreditLedgerEntry.objects.for_account(account_a).get(kind="grant")
    assert entry.created_by == staff and entry.metadata["reason"] == "goodwill"
    ledger = client.get("/admin/billing/creditledgerentry/").content.decode()
    assert "1234" in ledger and staff.email in ledger
    assert client.get(f"/admin/billing/creditledgerentry/{entry.pk}/change/").status_code == 200
    assert client.post(f"/admin/billing/creditledgerentry/{entry.pk}/delete/").status_code == 403


def test_admin_grant_action_needs_a_reason(client, account_a):
    client.force_login(make_user("staff2@groundwork.test", is_staff=True, is_superuser=True))
    page = client.post(
        "/admin/accounts/account/",
        {"action": "grant_credits", "_selected_action": [account_a.pk], "apply": "1", "amount": "10", "reason": ""},
    )
    assert "This field is required" in page.content.decode()
    with account_context(account_a):
        assert balance_get(account=account_a) == 10000


def test_stale_holds_are_released_by_the_sweep(account_a, account_b, settings):
    settings.HOLD_TIMEOUT_SECONDS = 60
    with account_context(account_a):
        stale = credits_hold(account=account_a, amount=400, key="crashed-chat")
        CreditHold.objects.for_account(account_a).filter(pk=stale.pk).update(
            created_at=timezone.now() - dt.timedelta(minutes=5)
        )
    with account_context(account_b):
        credits_hold(account=account_b, amount=300, key="live-chat")
    assert release_stale_holds() == 1
    assert release_stale_holds() == 0
    with account_context(account_a):
        assert balance_get(account=account_a) == 10000
        assert CreditHold.objects.for_account(account_a).get().status == HoldStatus.RELEASED
    with account_context(account_b):
        assert balance_get(account=account_b) == 9700
        assert CreditHold.objects.for_account(account_b).get().status == HoldStatus.OPEN


def test_balance_in_the_header(client_a):
    page = client_a.get("/", follow=True).content.decode()
    assert "<span data-balance>10,000</span> credits" in page
