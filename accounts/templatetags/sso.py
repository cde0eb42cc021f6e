"""Single sign-on on the pages: `{% load sso %}{% sso_button next %}` (login, sign-up and the
"requires single sign-on" page; nothing when SSO is off) and `{% team_sso %}` (the Team page's
switch, for owners)."""

from django import template

from accounts.permissions import Action, section_account
from accounts.sso.oidc import sso_enabled
from accounts.sso.session import signed_in_with_sso

register = template.Library()


@register.inclusion_tag("accounts/sso/_button.html")
def sso_button(next_url=""):
    return {"show": sso_enabled(), "next": next_url or ""}


@register.inclusion_tag("accounts/sso/_team_switch.html", takes_context=True)
def team_sso(context):
    account = section_account(context, Action.SSO_REQUIRE)
    if account is None:
        return {"show": False}
    request = context["request"]
    return {
        "show": True,
        "csrf_token": context.get("csrf_token"),
        "current_account": account,
        "sso_enabled": sso_enabled(),
        "signed_in_with_sso": signed_in_with_sso(request.session),
    }
