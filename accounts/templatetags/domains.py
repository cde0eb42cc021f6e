"""The Team page's verified domains: `{% load domains %}{% team_domains %}` (owners)."""

from django import template

from accounts.domains.models import VerificationMailbox
from accounts.domains.selectors import domain_list
from accounts.permissions import Action, section_account

register = template.Library()


@register.inclusion_tag("accounts/domains/_team_domains.html", takes_context=True)
def team_domains(context):
    account = section_account(context, Action.DOMAINS_MANAGE)
    if account is None:
        return {"show": False}
    return {
        "show": True,
        "csrf_token": context.get("csrf_token"),
        "domains": list(domain_list(account=account)),
        "mailboxes": VerificationMailbox.choices,
    }
