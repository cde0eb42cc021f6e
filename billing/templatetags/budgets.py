"""The Team page's budgets section, rendered by billing: `{% load budgets %}{% team_budgets %}`."""

from django import template

from accounts.models import ApiKey, Membership
from accounts.permissions import Action, section_account
from billing.budgets import budget_list, budget_statuses
from billing.models import BudgetPeriod

register = template.Library()


@register.inclusion_tag("billing/_team_budgets.html", takes_context=True)
def team_budgets(context):
    account = section_account(context, Action.BUDGETS_MANAGE)
    if account is None:
        return {"show": False}
    members = Membership.objects.for_account(account).select_related("user").order_by("user__email")
    keys = ApiKey.objects.for_account(account).filter(revoked_at__isnull=True).order_by("name")
    return {
        "show": True,
        "csrf_token": context.get("csrf_token"),
        "current_account": account,
        "statuses": budget_statuses(account=account, budgets=budget_list(account=account)),
        "targets": [(f"user:{m.user_id}", m.user.email) for m in members]
        + [(f"key:{k.pk}", f"API key {k}") for k in keys],
        "periods": BudgetPeriod.choices,
    }
