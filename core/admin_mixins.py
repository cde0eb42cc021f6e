"""Shared by every admin of a tenant-owned model."""

from django.contrib import admin
from django.db.models import Q
from django.urls import reverse
from django.utils.html import format_html, format_html_join


class AllAccountsMixin:
    """Tenant models in the admin read through the explicit cross-account manager."""

    def get_queryset(self, request):
        qs = self.model.all_accounts.get_queryset()
        ordering = self.get_ordering(request)
        return qs.order_by(*ordering) if ordering else qs


class ReadOnlyMixin:
    """Nothing added, changed or deleted through the admin's own forms: these rows are made
    and changed by the product's services (which validate, enqueue and notify); staff act
    on them through permission-checked actions."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# --- actions: who did what --------------------------------------------------------------


def record_action(modeladmin, request, objects, message: str) -> None:
    """One admin LogEntry per object an action touched: the staff user, the object and
    what was done ("Grant credits: 5,000 (annual plan)"). Shown in each object's History."""
    for obj in objects:
        modeladmin.log_change(request, obj, message)


# --- the account filter -----------------------------------------------------------------


class AccountFilter(admin.SimpleListFilter):
    """Filter a tenant model's list by account, typed as an id, a slug or a name: a list
    of a thousand account links would be no filter at all. The account page links here
    with `?account=<id>`."""

    title = "account"
    parameter_name = "account"
    template = "admin/account_filter.html"

    def lookups(self, request, model_admin):
        # Never empty, or Django hides the filter; the template draws a search box instead.
        return [(self.value() or "", self.value() or "")]

    def queryset(self, request, queryset):
        value = (self.value() or "").replace("\x00", "").strip()
        if not value:
            return queryset
        if value.isdigit():
            return queryset.filter(account_id=int(value))
        return queryset.filter(Q(account__slug=value) | Q(account__name__iexact=value))

    def choices(self, changelist):
        yield {
            "value": self.value() or "",
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
            # The other filters, the search and the ordering survive a new account.
            "hidden": [
                (name, value)
                for name, values in changelist.filter_params.items()
                if name != self.parameter_name
                for value in values
            ],
        }


def account_filter_url(model, account_id: int) -> str:
    return f"{reverse(f'admin:{model._meta.app_label}_{model._meta.model_name}_changelist')}?account={account_id}"


# --- panels on the account page ---------------------------------------------------------


def html_table(headers, rows, *, empty: str = "None yet.") -> str:
    """A small read-only table for the account page. Every cell is escaped unless it is
    already safe (format_html)."""
    if not rows:
        return format_html("<p>{}</p>", empty)
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join(
        "", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows)
    )
    return format_html('<table class="support-panel"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body)
