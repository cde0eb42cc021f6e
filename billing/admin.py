"""Support staff: a read-only ledger, balances, holds, the account page's credits, and a
"Grant credits" action that needs its own permission (billing.grant_credits)."""

from django import forms
from django.contrib import admin, messages
from django.db.models import OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.http import HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html

from accounts.admin import AccountAdmin, Panel
from audit.actors import user_actor
from billing import operators
from billing.errors import BillingError
from billing.models import AccountBalance, BillingSettings, Budget, CreditHold, CreditLedgerEntry, HoldStatus, Purchase
from billing.purchases.selectors import purchase_list
from billing.services import credits_grant
from core.admin_mixins import (
    AccountFilter,
    AllAccountsMixin,
    ReadOnlyMixin,
    account_filter_url,
    html_table,
    record_action,
)
from core.tenancy import account_context

RECENT_LEDGER_ENTRIES = 20
SPEND_DAYS = 30


class ReadOnlyAdmin(AllAccountsMixin, ReadOnlyMixin, admin.ModelAdmin):
    pass


@admin.register(CreditLedgerEntry)
class CreditLedgerEntryAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "account",
        "kind",
        "delta",
        "balance_after",
        "tokens",
        "shortfall",
        "model",
        "reference",
        "reason",
        "created_by",
        "spent_by_user",
        "spent_by_api_key",
    )
    list_filter = (AccountFilter, "kind", "created_at", "provider")
    search_fields = (
        "account__name",
        "account__slug",
        "reference",
        "idempotency_key",
        "model",
        "created_by__email",
        "spent_by_user__email",
    )
    list_select_related = ("account", "created_by", "spent_by_user", "spent_by_api_key")
    date_hierarchy = "created_at"

    @admin.display(description="reason")
    def reason(self, entry):
        return (entry.metadata or {}).get("reason", "")


@admin.register(AccountBalance)
class AccountBalanceAdmin(ReadOnlyAdmin):
    list_display = ("account", "balance", "updated_at")
    list_filter = (AccountFilter,)
    search_fields = ("account__name", "account__slug")
    list_select_related = ("account",)


@admin.register(CreditHold)
class CreditHoldAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "account", "key", "amount", "status", "used_tokens", "closed_at")
    list_filter = ("status", AccountFilter)
    search_fields = ("account__name", "key", "reference")
    list_select_related = ("account",)


@admin.register(Budget)
class BudgetAdmin(ReadOnlyAdmin):
    """Read-only: an account's owners and admins set budgets (Team page, API), not support."""

    list_display = ("account", "user", "api_key", "period", "limit", "created_by", "updated_at")
    list_filter = ("period", AccountFilter)
    search_fields = ("account__name", "user__email", "api_key__name")
    list_select_related = ("account", "user", "api_key", "created_by")


@admin.register(BillingSettings)
class BillingSettingsAdmin(ReadOnlyAdmin):
    """Read-only: an account's owners set its billing contact and alert (Credits page, API);
    support sees them to answer "why did we (not) get an alert"."""

    list_display = (
        "account",
        "contact_email",
        "low_balance_threshold",
        "alert_armed",
        "last_alert_at",
        "updated_by",
        "updated_at",
    )
    list_filter = ("alert_armed", AccountFilter)
    search_fields = ("account__name", "contact_email")
    list_select_related = ("account", "updated_by")


@admin.register(Purchase)
class PurchaseAdmin(ReadOnlyAdmin):
    """Read-only: credits bought with Stripe (billing/purchases); support finds a purchase by
    its Checkout Session or payment intent to answer "we paid, where are the credits"."""

    list_display = (
        "created_at",
        "account",
        "credits",
        "amount",
        "status",
        "credits_granted",
        "refunded",
        "credits_taken_back",
        "stripe_session_id",
        "created_by",
    )
    list_filter = ("status", "currency", AccountFilter)
    search_fields = ("account__name", "stripe_session_id", "payment_intent_id", "public_id", "created_by__email")
    list_select_related = ("account", "created_by")

    # Amounts in their currency's decimals (billing/money.py), never the stored smallest units.
    @admin.display(description="amount", ordering="amount_cents")
    def amount(self, purchase):
        return str(purchase.amount)

    @admin.display(description="refunded", ordering="refunded_cents")
    def refunded(self, purchase):
        return str(purchase.refunded) if purchase.refunded_cents else "—"


# --- on the account admin (accounts/ stands below billing and must not import it) --------


class GrantForm(forms.Form):
    amount = forms.IntegerField(min_value=1, help_text="Credits to add to each selected account")
    reason = forms.CharField(max_length=500, help_text="Kept in the ledger, e.g. “annual plan renewal”")


@admin.action(description="Grant credits to selected accounts", permissions=["grant_credits"])
def grant_credits(modeladmin, request, queryset):
    form = GrantForm(request.POST if "apply" in request.POST else None)
    if "apply" in request.POST and form.is_valid():
        amount, reason = form.cleaned_data["amount"], form.cleaned_data["reason"]
        granted = []
        for account in queryset:
            try:
                with account_context(account):
                    # created_by on the entry is the staff user: the ledger says who minted it.
                    credits_grant(account=account, amount=amount, reason=reason, actor=request.user)
            except BillingError as exc:
                modeladmin.message_user(request, f"{account}: {exc.message}", messages.ERROR)
                break
            granted.append(account)
        record_action(modeladmin, request, granted, f"Grant credits: {amount:,} ({reason})")
        if granted:
            modeladmin.message_user(
                request, f"Granted {amount:,} credits to {len(granted)} account(s).", messages.SUCCESS
            )
        return None
    return TemplateResponse(
        request,
        "admin/billing/grant_credits.html",
        {
            **modeladmin.admin_site.each_context(request),
            "title": "Grant credits",
            "form": form,
            "accounts": queryset,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            "opts": modeladmin.model._meta,
        },
    )


@admin.display(description="credits", ordering="credits")
def account_credits(account):
    return f"{account.credits:,}"


def credits_panel(account) -> str:
    """The balance, what open holds reserve, and the latest ledger entries."""
    balance = AccountBalance.all_accounts.filter(account=account).values_list("balance", flat=True).first() or 0
    held = CreditHold.all_accounts.filter(account=account, status=HoldStatus.OPEN).aggregate(s=Sum("amount"))["s"]
    entries = (
        CreditLedgerEntry.all_accounts.filter(account=account)
        .select_related("created_by")
        .order_by("-created_at", "-pk")[:RECENT_LEDGER_ENTRIES]
    )
    rows = [
        (
            f"{e.created_at:%Y-%m-%d %H:%M}",
            e.get_kind_display(),
            f"{e.delta:+,}",
            f"{e.balance_after:,}",
            e.reference or (e.metadata or {}).get("reason", ""),
            e.created_by or "",
        )
        for e in entries
    ]
    return format_html(
        '<p><strong>{} credits</strong>{}</p>{}<p><a href="{}">The whole ledger of this account →</a></p>',
        f"{balance:,}",
        f" ({held:,} held by calls in progress)" if held else "",
        html_table(("when", "kind", "change", "balance after", "reference / reason", "by"), rows),
        account_filter_url(CreditLedgerEntry, account.pk),
    )


def credits_in_panel(account) -> str:
    """Grants (a paid purchase's included), sign-up credits and what refunds took back
    (operators.CREDITS_IN_KINDS)."""
    with account_context(account):
        entries = operators.credits_in_list(account=account)
    rows = [
        (
            f"{e.created_at:%Y-%m-%d %H:%M}",
            e.get_kind_display(),
            f"{e.delta:+,}",
            (e.metadata or {}).get("reason", "") or e.reference,
            e.created_by or "",
        )
        for e in entries
    ]
    return html_table(
        ("when", "kind", "credits", "reason / reference", "by"), rows, empty="No grants or purchases yet."
    )


def purchases_panel(account) -> str:
    """The account's Stripe purchases: what was bought, paid, granted and taken back."""
    with account_context(account):
        purchases = list(purchase_list(account=account)[:RECENT_LEDGER_ENTRIES])
    rows = [
        (
            f"{p.created_at:%Y-%m-%d %H:%M}",
            f"{p.credits:,}",
            str(p.amount),
            p.get_status_display(),
            f"{p.credits_granted:,}",
            f"{p.credits_taken_back:,}",
            p.created_by or "",
            p.stripe_session_id,
        )
        for p in purchases
    ]
    return format_html(
        '{}<p><a href="{}">All purchases of this account →</a></p>',
        html_table(
            ("when", "credits", "amount", "status", "granted", "taken back", "by", "Checkout Session"),
            rows,
            empty="No purchases yet.",
        ),
        account_filter_url(Purchase, account.pk),
    )


def spend_panel(account) -> str:
    """Spend per day and per model over the last 30 days."""
    with account_context(account):
        days = operators.spend_per_day(account=account, days=SPEND_DAYS)
        models = operators.spend_per_model(account=account, days=SPEND_DAYS)
    headers = ("tokens", "credits", "calls")
    return format_html(
        "<h4>Per model</h4>{}<h4>Per day</h4>{}",
        html_table(
            ("model", *headers),
            [(m.label, f"{m.tokens:,}", f"{m.credits:,}", f"{m.calls:,}") for m in models],
            empty="Nothing charged in the last 30 days.",
        ),
        html_table(
            ("day", *headers),
            [(d.label, f"{d.tokens:,}", f"{d.credits:,}", f"{d.calls:,}") for d in days],
            empty="Nothing charged in the last 30 days.",
        ),
    )


class LedgerMonthForm(forms.Form):
    month = forms.CharField(max_length=7, help_text="YYYY-MM, e.g. 2026-11 (UTC)")

    def clean_month(self):
        month = self.cleaned_data["month"].strip()
        try:
            operators.month_parse(month)
        except operators.MonthError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return month


@admin.action(description="Export ledger (month) as CSV", permissions=["export_ledger"])
def export_ledger(modeladmin, request, queryset):
    """One account's ledger for one month, as a CSV download; audited (ledger.export)."""
    accounts = list(queryset[:2])
    if len(accounts) != 1:
        modeladmin.message_user(request, "Select one account to export its ledger.", messages.ERROR)
        return None
    [account] = accounts
    form = LedgerMonthForm(request.POST if "apply" in request.POST else None)
    if "apply" in request.POST and form.is_valid():
        month = form.cleaned_data["month"]
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="ledger-{account.pk}-{month}.csv"'
        with account_context(account):
            operators.ledger_export_csv(
                account=account, month=month, out=response, actor=user_actor(request.user, staff=True)
            )
        record_action(modeladmin, request, [account], f"Export ledger: {month}")
        return response
    return TemplateResponse(
        request,
        "admin/billing/export_ledger.html",
        {
            **modeladmin.admin_site.each_context(request),
            "title": "Export ledger (month)",
            "form": form,
            "account": account,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            "opts": modeladmin.model._meta,
        },
    )


AccountAdmin.add_column(
    account_credits,
    annotation={
        "credits": Coalesce(
            Subquery(AccountBalance.all_accounts.filter(account=OuterRef("pk")).values("balance")[:1]), Value(0)
        )
    },
)
AccountAdmin.add_panel(
    Panel(
        "credits_panel",
        f"Credits (latest {RECENT_LEDGER_ENTRIES} ledger entries)",
        "billing.view_creditledgerentry",
        credits_panel,
    )
)
AccountAdmin.add_panel(
    Panel("credits_in_panel", "Grants and purchases", "billing.view_creditledgerentry", credits_in_panel)
)
AccountAdmin.add_panel(Panel("purchases_panel", "Purchases (Stripe)", "billing.view_purchase", purchases_panel))
AccountAdmin.add_panel(
    Panel("spend_panel", f"Spend, last {SPEND_DAYS} days", "billing.view_creditledgerentry", spend_panel)
)
AccountAdmin.add_action(grant_credits, permission="billing.grant_credits")
AccountAdmin.add_action(export_ledger, permission="billing.export_ledger")
