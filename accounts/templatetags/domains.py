"""The Team page's verified domains: `{% load domains %}{% team_domains %}` (owners)."""
from django import template

from accounts.domains.models import VerificationMailbox
from accounts.domains.selectors import domain_list
from accounts.permissions import Action, principal_may

register = template.Library()


@register.inclusion_tag("accounts/domains/_team_domains.html", takes_context=True)
def team_domains(context):
    request = context["request"]
    account = getattr(request, "account", None)
    if account is None or not principal_may(request, Action.DOMAINS_MANAGE):
        return {"show": False}
    return {"show": True, "csrf_token": context.get("csrf_token"), "domains": list(domain_list(account=account)),
            "mailboxes": VerificationMailbox.choices}
