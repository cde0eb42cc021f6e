"""Single sign-on pages: the start (`/sso/login/`, a 302 to the provider), the callback
(`/sso/callback/`, the redirect URI), the owner's switch on the Team page, and the page a
password session gets for an account that requires single sign-on. Thin: the provider is
accounts/sso/oidc.py, the rules accounts/sso/services.py."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET

from accounts.errors import AccountError
from accounts.forms import LoginForm
from accounts.permissions import Action, page_check
from accounts.resolution import SESSION_ACCOUNT_KEY
from accounts.selectors import membership_list_for_user
from accounts.services import user_last_account_set
from accounts.sso import oidc
from accounts.sso.errors import SsoError
from accounts.sso.services import account_sso_required_set, account_staff_password_2fa_set, sso_sign_in
from accounts.sso.session import (
    SSO_BACKEND,
    session_mark_sso,
    session_passes_sso,
    signed_in_with_sso,
    sso_required_message,
    sso_shuts_out,
)
from core.pages import account_page, page_post

logger = logging.getLogger("groundwork.sso")

NEXT_KEY = "sso_next"
# The team a password session asked the switcher for: opened once the session signs in with SSO.
WANTED_ACCOUNT_KEY = "sso_wanted_account_id"
# What a password session may still open while its account requires single sign-on: signing
# in with SSO, logging out, switching to (or making, or joining) another team, the emailed
# links; and what is not a page (the API and
# /v1 answer for themselves: no account, no access; the admin has its own rules).
OPEN_URL_NAMES = {
    "sso-login",
    "sso-callback",
    "logout",
    "switch",
    "login",
    "account-create",
    "invitation",
    "invitation-accept",
    "invitation-decline",
    "verify-email",
    "verify-email-resend",
}
OPEN_PREFIXES = ("/static/", "/api/", "/v1/", "/mcp", "/admin/", "/healthz", "/metrics")


def _safe_next(request, target: str) -> str:
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return ""


def _login_page(request, exc: SsoError):
    """The login page, with what went wrong (the status says it too; never a traceback)."""
    return render(
        request,
        "accounts/login.html",
        {"form": LoginForm(request), "sso_error": exc.message, "next": ""},
        status=exc.status,
    )


@require_GET
def sso_login_view(request):
    if not oidc.sso_enabled():
        # An old bookmark or a link from a colleague's server: say so where one can still sign in.
        messages.info(request, "Single sign-on is not set up on this server: sign in with your email and password.")
        return redirect("accounts:login")
    request.session[NEXT_KEY] = _safe_next(request, request.GET.get("next", ""))
    try:
        return oidc.authorization_redirect(
            request, redirect_uri=request.build_absolute_uri(reverse("accounts:sso-callback"))
        )
    except SsoError as exc:
        return _login_page(request, exc)


@require_GET
def sso_callback_view(request):
    if not oidc.sso_enabled():
        raise Http404
    try:
        outcome = sso_sign_in(identity=oidc.identity_from_callback(request))
    except SsoError as exc:
        logger.warning("sso sign-in refused (%s): %s", exc.code, exc.message)
        return _login_page(request, exc)
    target = request.session.pop(NEXT_KEY, "")
    wanted = request.session.pop(WANTED_ACCOUNT_KEY, None)
    # SSO relies on the provider's own MFA: no second factor of ours after it.
    login(request, outcome.user, backend=SSO_BACKEND)
    session_mark_sso(request.session)
    # An invitation just accepted wins; else the team the switcher sent the person here for.
    opens_wanted = bool(
        wanted
        and not outcome.account_id
        and any(m.account_id == wanted for m in membership_list_for_user(user=outcome.user))
    )
    if opens_wanted:
        user_last_account_set(user=outcome.user, account_id=wanted)
    account_id = outcome.account_id or (wanted if opens_wanted else None) or outcome.user.last_account_id
    if account_id:
        request.session[SESSION_ACCOUNT_KEY] = account_id
    logger.info("sso sign-in: user %s (subject at %s)", outcome.user.pk, settings.OIDC_ISSUER)
    messages.success(request, outcome.message)
    return redirect(_safe_next(request, target) or "home")


def _owner_switch(request, change, on: str, off: str):
    """A Team page switch of this section (owners: SSO_REQUIRE): `change(account, required)`
    with the posted `required` ("1" on, "0" off); the message is its refusal (by role, the
    role changed since the page's check: the 403 page), or `on`/`off`."""
    required = request.POST.get("required") == "1"
    return page_post(
        request,
        lambda: change(request.account, required),
        to="accounts:team",
        told=AccountError,
        success=(on if required else off).format(name=request.account.name),
        refusal_pages=True,
    )


owners_switch = account_page(page_check(Action.SSO_REQUIRE), methods=("POST",))


@owners_switch
def sso_required_set_view(request):
    """The Team page's switch "Members must sign in with SSO"."""
    return _owner_switch(
        request,
        lambda account, required: account_sso_required_set(
            account=account,
            actor=request.user,
            required=required,
            actor_signed_in_with_sso=signed_in_with_sso(request.session),
        ),
        "Members of {name} must now sign in with SSO.",
        "Members of {name} may sign in with a password again.",
    )


@owners_switch
def staff_password_2fa_set_view(request):
    """The Team page's switch "Staff must use a password + 2FA": staff members may not use SSO."""
    return _owner_switch(
        request,
        lambda account, required: account_staff_password_2fa_set(
            account=account, actor=request.user, required=required
        ),
        "Support staff and superusers among the members of {name} must now sign in with their password and "
        "two-factor code.",
        "Support staff and superusers among the members of {name} may sign in with SSO again.",
    )


def sso_switch_refusal(request, membership):
    """The team switcher's answer when this session may not open `membership`'s team (it
    requires SSO and the session signed in with a password): the session stays where it is,
    and the person is sent to sign in with SSO, which then opens that team; None otherwise."""
    if not sso_shuts_out(
        membership.account,
        by_sso=session_passes_sso(user=request.user, account=membership.account, session=request.session),
    ):
        return None
    if not oidc.sso_enabled():
        messages.error(
            request,
            f"{sso_required_message(membership.account)} Single sign-on is not set up on this "
            "server: ask its operator.",
        )
        return redirect("home")
    request.session[WANTED_ACCOUNT_KEY] = membership.account_id
    return redirect(f"{reverse('accounts:sso-login')}?next=/")


def sso_required_response(request):
    """For a session whose account requires single sign-on and that signed in otherwise: the
    page saying so (403), with the SSO button and the other teams; None where the path stays
    open (see OPEN_URL_NAMES)."""
    if request.path.startswith(OPEN_PREFIXES):
        return None
    try:
        if resolve(request.path_info).url_name in OPEN_URL_NAMES:
            return None
    except Resolver404:
        pass
    account = request.sso_required_account
    others = [m for m in request.memberships if m.account_id != account.pk]
    return render(
        request,
        "accounts/sso_required.html",
        {"required_account": account, "other_memberships": others, "sso_enabled": oidc.sso_enabled()},
        status=403,
    )
