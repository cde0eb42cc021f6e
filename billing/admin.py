"""Support staff: a read-only ledger, balances, holds, and a "grant credits" action."""
from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from accounts.admin import AccountAdmin
from core.admin_mixins import AllAccountsMixin
from core.tenancy import account_context
from billing.errors import BillingError
from billing.models import AccountBalance, CreditHold, CreditLedgerEntry
from billing.services import credits_grant


class ReadOnlyAdmin(AllAccountsMixin, admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(CreditLedgerEntry)
class CreditLedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "account", "kind", "delta", "balance_after", "tokens", "shortfall", "model",
                    "reference", "created_by")
    list_filter = ("kind", "created_at", "provider")
    search_fields = ("account__name", "account__slug", "reference", "idempotency_key", "model")
    list_select_related = ("account", "created_by")
    date_hierarchy = "created_at"


@admin.register(AccountBalance)
class AccountBalanceAdmin(ReadOnlyAdmin):
    list_display = ("account", "balance", "updated_at")
    search_fields = ("account__name", "account__slug")
    list_select_related = ("account",)


@admin.register(CreditHold)
class CreditHoldAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "account", "key", "amount", "status", "used_tokens", "closed_at")
    list_filter = ("status",)
    search_fields = ("account__name", "key", "reference")
    list_select_related = ("account",)


class GrantForm(forms.Form):
    amount = forms.IntegerField(min_value=1, help_text="Credits to add to each selected account")
    reason = forms.CharField(max_length=500, help_text="Kept in the ledger, e.g. “annual plan renewal”")


@admin.action(description="Grant credits to selected accounts")
def grant_credits(modeladmin, request, queryset):
    form = GrantForm(request.POST if "apply" in request.POST else None)
    if "apply" in request.POST and form.is_valid():
        for account in queryset:
            try:
                with account_context(account):
                    credits_grant(account=account, amount=form.cleaned_data["amount"],
                                  reason=form.cleaned_data["reason"], actor=request.user)
            except BillingError as exc:
                modeladmin.message_user(request, f"{account}: {exc.message}", messages.ERROR)
                return None
        modeladmin.message_user(
            request, f"Granted {form.cleaned_data['amount']:,} credits to {queryset.count()} account(s).",
            messages.SUCCESS)
        return None
    return TemplateResponse(request, "admin/billing/grant_credits.html", {
        **modeladmin.admin_site.each_context(request),
        "title": "Grant credits", "form": form, "accounts": queryset,
        "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME, "opts": modeladmin.model._meta,
    })


@admin.display(description="credits")
def account_credits(account):
    balance = AccountBalance.all_accounts.filter(account=account).values_list("balance", flat=True).first()
    return balance or 0


# The account admin belongs to accounts/, which stands below billing and must not import it:
# billing adds its column and action to it here.
AccountAdmin.list_display = (*AccountAdmin.list_display, account_credits)
AccountAdmin.actions = [*(AccountAdmin.actions or []), grant_credits]
