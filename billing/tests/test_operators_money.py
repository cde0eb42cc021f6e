"""Operators see money and people: the admin's account page shows the
account's grants (and purchases), its spend per day and per model; one month of its ledger is
exported as CSV from the admin or `manage.py export_ledger`, audited; the account id is shown
where support needs it."""

import csv
import datetime as dt
import io

import pytest
from django.core.management import CommandError, call_command

from accounts.models import Role
from accounts.tests.factories import add_member, make_user, staff_with
from audit.models import AuditEntry
from billing import operators
from billing.services import credits_debit, credits_grant
from core.tenancy import account_context

pytestmark = pytest.mark.django_db
PRICES = {"chat": 1000, "chat:big-chat": 3000, "embedding": 1000}


def _spend(account, settings):
    settings.CREDITS_PER_1K_TOKENS = PRICES
    with account_context(account):
        credits_grant(account=account, amount=7_000, reason="annual plan =renewal", key="plan")
        credits_debit(account=account, tokens=100, key="c1", kind="chat", model="big-chat", user=account.test_owner)
        credits_debit(account=account, tokens=200, key="c2", kind="chat", model="big-chat")
        credits_debit(account=account, tokens=50, key="e1", kind="embedding", model="e5-small")


def _audits(account, action):
    with account_context(account):
        return list(AuditEntry.objects.for_account(account).filter(action=action))


def test_spend_per_model_and_day_and_credits_in(account_a, account_b, settings):
    _spend(account_a, settings)
    with account_context(account_a):
        models = operators.spend_per_model(account=account_a)
        days = operators.spend_per_day(account=account_a)
        credits_in = operators.credits_in_list(account=account_a)
    assert [(m.label, m.tokens, m.credits, m.calls) for m in models] == [
        ("big-chat (chat)", 300, 900, 2),
        ("e5-small (embedding)", 50, 50, 1),
    ]
    assert [(d.label, d.credits) for d in days] == [(f"{dt.datetime.now(dt.UTC):%Y-%m-%d}", 950)]
    assert [e.kind for e in credits_in] == ["grant", "signup"]
    with account_context(account_b):  # isolation: B sees nothing of A's
        assert operators.spend_per_model(account=account_b) == []
        assert [e.kind for e in operators.credits_in_list(account=account_b)] == ["signup"]


def test_the_admin_account_page_shows_id_grants_and_spend(client, account_a, settings):
    _spend(account_a, settings)
    client.force_login(staff_with("accounts.view_account", "billing.view_creditledgerentry", "billing.export_ledger"))
    page = client.get(f"/admin/accounts/account/{account_a.pk}/change/").content.decode()
    assert "Grants and purchases" in page and "annual plan =renewal" in page and "+7,000" in page
    assert "Spend, last 30 days" in page and "big-chat (chat)" in page and "<td>900</td>" in page
    assert f'<div class="readonly">{account_a.pk}</div>' in page
    listing = client.get("/admin/accounts/account/", {"q": str(account_a.pk)}).content.decode()
    assert "Acme" in listing and "Export ledger (month) as CSV" in listing
    # Staff without ledger rights see neither the money nor the export.
    client.force_login(staff_with("accounts.view_account"))
    page = client.get(f"/admin/accounts/account/{account_a.pk}/change/").content.decode()
    assert "Grants and purchases" not in page and "big-chat" not in page
    assert "Export ledger" not in client.get("/admin/accounts/account/").content.decode()


def _export(client, account, month):
    return client.post(
        "/admin/accounts/account/",
        {"action": "export_ledger", "_selected_action": [account.pk], "apply": "1", "month": month},
    )


def test_the_admin_exports_a_month_as_csv_audited(client, account_a, account_b, settings):
    _spend(account_a, settings)
    staff = staff_with("accounts.view_account", "billing.view_creditledgerentry", "billing.export_ledger")
    client.force_login(staff)
    form = client.post("/admin/accounts/account/", {"action": "export_ledger", "_selected_action": [account_a.pk]})
    assert form.status_code == 200 and "Export ledger" in form.content.decode()
    bad = _export(client, account_a, "2026-13")
    assert bad.status_code == 200 and "is not a month: write it as YYYY-MM" in bad.content.decode()
    assert _audits(account_a, "ledger.export") == []
    month = f"{dt.datetime.now(dt.UTC):%Y-%m}"
    response = _export(client, account_a, month)
    assert response["Content-Type"].startswith("text/csv")
    assert f"ledger-{account_a.pk}-{month}.csv" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == list(operators.EXPORT_COLUMNS)
    body = rows[1:]
    assert [r[1] for r in body] == ["signup", "grant", "chat", "chat", "embedding"]
    assert body[2][2:5] == ["big-chat", "100", "-300"] and body[2][7] == account_a.test_owner.email
    assert body[1][6] == "annual plan =renewal"
    assert int(body[-1][5]) == int(body[0][4]) + 7_000 - 950  # balance after
    [audit] = _audits(account_a, "ledger.export")
    assert audit.actor_id == staff.pk and audit.detail == {"month": month, "rows": 5}
    assert _audits(account_b, "ledger.export") == []
    # Two accounts at once: refused, nothing exported.
    both = client.post(
        "/admin/accounts/account/",
        {"action": "export_ledger", "apply": "1", "month": month, "_selected_action": [account_a.pk, account_b.pk]},
        follow=True,
    )
    assert "Select one account" in both.content.decode()
    # View rights, even on the ledger, are not the export's: refused.
    client.force_login(staff_with("accounts.view_account", "billing.view_creditledgerentry"))
    refused = _export(client, account_a, month)
    assert not refused.get("Content-Type", "").startswith("text/csv")
    assert len(_audits(account_a, "ledger.export")) == 1


def test_export_ledger_command(account_a, settings, tmp_path):
    _spend(account_a, settings)
    month = f"{dt.datetime.now(dt.UTC):%Y-%m}"
    out = io.StringIO()
    call_command("export_ledger", "--account", str(account_a.pk), "--month", month, stdout=out)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[0] == list(operators.EXPORT_COLUMNS) and len(rows) == 6
    target = tmp_path / "ledger.csv"
    call_command(
        "export_ledger",
        "--account",
        str(account_a.pk),
        "--month",
        "2020-01",
        "--output",
        str(target),
        stderr=io.StringIO(),
    )
    assert target.read_text().splitlines() == [",".join(operators.EXPORT_COLUMNS)]  # an empty month
    audits = _audits(account_a, "ledger.export")
    assert len(audits) == 2 and {a.actor_kind for a in audits} == {"system"}
    with pytest.raises(CommandError, match="is not a month"):
        call_command("export_ledger", "--account", str(account_a.pk), "--month", "november")
    with pytest.raises(CommandError, match="No account has id"):
        call_command("export_ledger", "--account", "999999", "--month", month)


def test_the_team_page_shows_the_account_id_to_admins_only(client, account_a):
    client.force_login(account_a.test_owner)
    page = client.get("/team/").content.decode()
    assert f'Account id: <code id="account-id-value">{account_a.pk}</code>' in page
    viewer = make_user()
    add_member(account_a, viewer, role=Role.VIEWER)
    client.force_login(viewer)
    assert "account-id-value" not in client.get("/team/").content.decode()


def test_grant_credits_help_names_the_account_id():
    from billing.management.commands.grant_credits import Command

    assert "Team page" in Command.help and "Account id" in Command.help


def test_a_cell_that_a_spreadsheet_would_run_is_quoted(account_a):
    with account_context(account_a):
        credits_grant(account=account_a, amount=5, reason='=HYPERLINK("http://x")', key="f")
        out = io.StringIO()
        operators.ledger_export_csv(account=account_a, month=f"{dt.datetime.now(dt.UTC):%Y-%m}", out=out)
    [*_, row] = csv.reader(io.StringIO(out.getvalue()))
    assert row[6] == '\'=HYPERLINK("http://x")'
