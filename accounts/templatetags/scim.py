"""The Team page's provisioning section: `{% load scim %}{% scim_tokens %}` (owners)."""

from django import template

from accounts.permissions import Action, section_account
from accounts.scim.pages import NEW_TOKEN_SESSION_KEY
from accounts.scim.selectors import scim_token_list

register = template.Library()


@register.inclusion_tag("accounts/scim/_team_tokens.html", takes_context=True)
def scim_tokens(context):
    account = section_account(context, Action.SCIM_MANAGE)
    if account is None:
        return {"show": False}
    request = context["request"]
    return {
        "show": True,
        "csrf_token": context.get("csrf_token"),
        "tokens": list(scim_token_list(account=account)),
        # The new secret is shown on this one view of the page, then gone from the session.
        "new_token": request.session.pop(NEW_TOKEN_SESSION_KEY, None),
        "base_url": request.build_absolute_uri("/scim/v2/"),
    }
