"""Account pages: sign-up, login, switching accounts, team and API keys (thin views)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from accounts import ratelimit, selectors, services
from accounts.errors import AccountError
from accounts.forms import (
    AccountDeleteForm,
    AccountForm,
    ApiKeyForm,
    InvitationSignupForm,
    InviteForm,
    LoginForm,
    RoleForm,
    SignupForm,
)
from accounts.permissions import Action, PageForbidden, page_check, page_require, principal_may
from accounts.profile import two_factor
from accounts.resolution import SESSION_ACCOUNT_KEY
from accounts.sso.views import sso_switch_refusal
from audit.selectors import audit_entry_list
from audit.services import ACTIONS
from core.error_codes import CoreErrorCode
from core.pages import account_page, page_post

AUDIT_ON_PAGE = 50  # the Team page's latest audit entries; the API pages through all of them


def _form_error(form, exc: AccountError):
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)


def _site_url(request) -> str:
    return request.build_absolute_uri("/").rstrip("/")


def _safe_next(request) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return ""


def _too_many(request, template: str, context: dict, wait: int):
    form = context["form"]
    form.add_error(None, ratelimit.too_many_message(wait))
    return render(request, template, context, status=429)


def _signup_limited(request, email: str, context: dict):
    """The sign-up page again (429) if this address or client signed up too often; else None,
    and this sign-up counts."""
    limits = ratelimit.signup_limits(request, email)
    wait = ratelimit.wait_for(limits)
    if wait:
        return _too_many(request, "accounts/signup.html", context, wait)
    for limit in limits:
        limit.hit()
    return None


def _signed_up(request, user, *, account_id: int, to: str, welcome: str):
    """A new person, signed in and in their team, welcomed."""
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    request.session[SESSION_ACCOUNT_KEY] = account_id
    messages.success(request, welcome)
    return redirect(to)


def signup_view(request):
    token = request.POST.get("invitation") or request.GET.get("invitation")
    if request.user.is_authenticated:
        return redirect(reverse("accounts:invitation", args=[token]) if token else (_safe_next(request) or "home"))
    if token:
        return _invitation_signup(request, token)
    form = SignupForm(request.POST or None)
    context = {"form": form, "next": _safe_next(request)}
    if request.method == "POST" and form.is_valid():
        if (refused := _signup_limited(request, form.cleaned_data["email"], context)) is not None:
            return refused
        if services.signup_claim_send(email=form.cleaned_data["email"], site_url=_site_url(request)):
            messages.info(
                request,
                f"We emailed {form.cleaned_data['email']} a link to set your password: open it, then log in here.",
            )
            return redirect("accounts:login")
        try:
            user, account = services.signup(**form.cleaned_data, site_url=_site_url(request))
        except AccountError as exc:
            _form_error(form, exc)
        else:
            return _signed_up(
                request,
                user,
                account_id=account.pk,
                to=context["next"] or "home",
                welcome=f"Welcome to Groundwork. {account.name} is ready. We sent a link to "
                f"{user.email}: open it to verify your address and receive your starting "
                "credits.",
            )
    return render(request, "accounts/signup.html", context)


def _invitation_signup(request, token: str):
    """The sign-up an invitation's link leads to: the invited address, fixed; submitting it
    joins the inviting account (services.invitation_signup) and lands on its dashboard."""
    try:
        invitation = services.invitation_for_token(token=token)
    except AccountError as exc:
        return render(
            request, "accounts/link_refused.html", {"title": "Invitation not valid", "error": exc}, status=exc.status
        )
    form = InvitationSignupForm(request.POST or None, initial={"email": invitation.email})
    context = {
        "form": form,
        "invitation": invitation,
        "token": token,
        "next": reverse("accounts:invitation", args=[token]),
    }
    if request.method == "POST" and form.is_valid():
        if (refused := _signup_limited(request, invitation.email, context)) is not None:
            return refused
        try:
            user, membership = services.invitation_signup(
                invitation=invitation, password=form.cleaned_data["password"], full_name=form.cleaned_data["full_name"]
            )
        except AccountError as exc:
            if exc.status in (404, 410):  # used or withdrawn while the form was open
                return render(
                    request,
                    "accounts/link_refused.html",
                    {"title": "Invitation not valid", "error": exc},
                    status=exc.status,
                )
            _form_error(form, exc)
        else:
            return _signed_up(
                request,
                user,
                account_id=membership.account_id,
                to="home",
                welcome=f"Welcome to Groundwork. You joined {invitation.account.name} as "
                f"{invitation.get_role_display().lower()}.",
            )
    return render(request, "accounts/signup.html", context)


class LoginView(auth_views.LoginView):
    template_name = "accounts/login.html"
    authentication_form = LoginForm
    redirect_authenticated_user = True

    def form_valid(self, form):
        user = form.get_user()
        if two_factor.two_factor_enabled(user):
            # Not signed in yet: the code step (accounts/profile/two_factor.py) signs the session in.
            two_factor.login_pending_set(self.request, user=user, backend=user.backend, next_url=self.get_success_url())
            return redirect("accounts:login-code")
        response = super().form_valid(form)
        # Land in the account the person used last (the middleware falls back to another
        # membership if they have left it since).
        if form.get_user().last_account_id:
            self.request.session[SESSION_ACCOUNT_KEY] = form.get_user().last_account_id
        return response

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.rate_limited:
            response.status_code = 429
        return response


class PasswordResetView(auth_views.PasswordResetView):
    """Django's reset (the same answer for known and unknown addresses), limited per
    address and per IP so it can be neither a mail cannon nor a probe."""

    def form_valid(self, form):
        limits = ratelimit.password_reset_limits(self.request, form.cleaned_data["email"])
        wait = ratelimit.wait_for(limits)
        if wait:
            return _too_many(self.request, self.template_name, self.get_context_data(form=form), wait)
        for limit in limits:
            limit.hit()
        return super().form_valid(form)


def verify_email_view(request, token: str):
    try:
        user, verified_now = services.email_verify(token=token)
    except AccountError as exc:
        return render(
            request, "accounts/link_refused.html", {"title": "Email not verified", "error": exc}, status=exc.status
        )
    if request.user.is_authenticated and request.user.pk == user.pk:
        if verified_now:
            messages.success(request, f"{user.email} is verified. Your starting credits are in your account.")
        return redirect("home")
    return render(request, "accounts/email_verified.html", {"verified_email": user.email})


@login_required
@require_POST
def verify_email_resend_view(request):
    user = request.user
    if user.email_verified_at is not None:
        messages.info(request, f"{user.email} is already verified.")
        return redirect("home")
    limits = ratelimit.verification_email_limits(user)
    wait = ratelimit.wait_for(limits)
    if wait:
        messages.error(request, ratelimit.too_many_message(wait))
        return redirect("home")
    limits[0].hit()
    services.email_verification_send(user=user, site_url=_site_url(request))
    messages.success(request, f"We sent a new link to {user.email}.")
    return redirect("home")


def invitation_view(request, token: str):
    """The emailed link: who invites you to what, then Accept or Decline (POST). Opening it
    joins nothing; accepting needs the session of the invited address."""
    try:
        invitation = services.invitation_for_token(token=token)
        if request.method == "POST" and request.user.is_authenticated:
            return _invitation_answer(request, invitation)
    except AccountError as exc:
        return render(
            request, "accounts/link_refused.html", {"title": "Invitation not valid", "error": exc}, status=exc.status
        )
    context = {"invitation": invitation, "path": request.path, "token": token}
    if request.user.is_authenticated and request.user.email.lower() != invitation.email.lower():
        context["wrong_user"] = True
        return render(request, "accounts/invitation.html", context, status=403)
    return render(request, "accounts/invitation.html", context)


def _invitation_answer(request, invitation):
    if request.POST.get("action") == "decline":
        services.invitation_decline(user=request.user, invitation=invitation)
        messages.info(request, f"You declined the invitation to {invitation.account.name}.")
        return redirect("home")
    services.invitation_accept(invitation=invitation, user=request.user, via_link=True)
    request.session[SESSION_ACCOUNT_KEY] = invitation.account_id
    messages.success(request, f"You joined {invitation.account.name} as {invitation.get_role_display().lower()}.")
    return redirect("home")


@login_required
@require_POST
def invitation_accept_view(request, invitation_id: int):
    def accept():
        membership = services.invitation_accept_by_id(user=request.user, invitation_id=invitation_id)
        request.session[SESSION_ACCOUNT_KEY] = membership.account_id
        return membership

    return page_post(
        request,
        accept,
        to="home",
        told=AccountError,
        refusal_pages=True,
        success=lambda membership: f"You joined {membership.account.name}.",
    )


@login_required
@require_POST
def invitation_decline_view(request, invitation_id: int):
    return page_post(
        request,
        lambda: services.invitation_decline(user=request.user, invitation_id=invitation_id),
        to="home",
        told=AccountError,
        refusal_pages=True,
        success="Invitation declined.",
        level=messages.INFO,
    )


@login_required
@require_POST
def account_create_view(request):
    form = AccountForm(request.POST)
    if form.is_valid():
        # Starting credits are one grant per verified person, and teams are capped per day
        # (services.team_create): a new team is no way to more free credits.
        try:
            account = services.team_create(name=form.cleaned_data["name"], owner=request.user)
        except AccountError as exc:
            messages.error(request, exc.message)
        else:
            services.user_last_account_set(user=request.user, account_id=account.pk)
            request.session[SESSION_ACCOUNT_KEY] = account.pk
            messages.success(request, _created_message(request.user, account))
    return redirect("home")


def _created_message(user, account) -> str:
    user.refresh_from_db(fields=["starting_credits_granted_at", "email_verified_at"])
    went_to = services.starting_credits_went_to(user=user)
    if went_to is not None and went_to.pk == account.pk:
        return f"Created {account.name}, with your starting credits."
    if went_to is not None:
        return (
            f"Created {account.name}. It starts without credits: your starting credits went to "
            f"{went_to.name} (one grant per person). An owner can add credits."
        )
    if user.signup_account_id and user.email_verified_at is None:
        return (
            f"Created {account.name}. It starts without credits: your starting credits go to "
            f"{user.signup_account.name} once your email address is verified."
        )
    return f"Created {account.name}. It starts without credits; verify your email address to receive yours."


@login_required
@require_POST
def account_switch_view(request):
    """Switch the session to another account the user belongs to (404 for any other id)."""
    try:
        account_id = int(request.POST.get("account_id", ""))
    except ValueError as exc:
        raise Http404 from exc
    membership = next((m for m in request.memberships if m.account_id == account_id), None)
    if membership is None:
        raise Http404
    if (refusal := sso_switch_refusal(request, membership)) is not None:
        return refusal
    request.session[SESSION_ACCOUNT_KEY] = account_id
    services.user_last_account_set(user=request.user, account_id=account_id)
    messages.success(request, f"Switched to {membership.account.name}.")
    return redirect("home")


@account_page()
def team_view(request):
    if not principal_may(request, Action.MEMBERS_MANAGE):
        return render(request, "accounts/forbidden.html", status=403)
    return render(request, "accounts/team.html", _team_context(request))


def _team_context(request, **extra) -> dict:
    actor = request.membership
    grantable = services.roles_grantable(actor_membership=actor)
    members = list(selectors.member_list(account=request.account))
    for m in members:
        # What this person may do to that row: only owners touch owners; nobody grants above
        # their own role (the services refuse it too, whatever is posted).
        m.manageable = services.member_manageable(actor_membership=actor, membership=m)
    context = {
        "members": members,
        "grantable_roles": [(v, label) for v, label in RoleForm.base_fields["role"].choices if v in grantable],
        "invitations": selectors.invitation_list(account=request.account),
        "may_manage_keys": principal_may(request, Action.KEYS_MANAGE),
        "api_keys": selectors.api_key_list(account=request.account),
        "invite_form": InviteForm(grantable=grantable),
        "key_form": ApiKeyForm(),
        "new_key": request.session.pop("new_api_key", None),
        "audit_entries": audit_entry_list(account=request.account, action=request.GET.get("action"))[:AUDIT_ON_PAGE],
        "audit_actions": ACTIONS,
        "audit_action": request.GET.get("action", ""),
        "delete_form": AccountDeleteForm(),
    }
    return {**context, **extra}


def _run(request, act, success: str):
    """A Team page form: its refusal as a message on the Team page (by role: the 403 page)."""
    return page_post(request, act, to="accounts:team", success=success, told=AccountError, refusal_pages=True)


def _form_refused(request, message: str):
    messages.error(request, message)
    return redirect("accounts:team")


members_post = account_page(page_check(Action.MEMBERS_MANAGE), methods=("POST",))
keys_post = account_page(page_check(Action.KEYS_MANAGE), methods=("POST",))


@members_post
def member_invite_view(request):
    form = InviteForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, "Enter a valid email address and choose a role.")
    return _run(
        request,
        lambda: services.member_invite(
            account=request.account, actor=request.user, site_url=_site_url(request), **form.cleaned_data
        ),
        f"Invited {form.cleaned_data['email']}. They join when they accept the link we emailed them.",
    )


@members_post
def member_role_view(request, membership_id: int):
    form = RoleForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, "Choose a role: owner, admin, member or viewer.")
    return _run(
        request,
        lambda: services.member_change_role(
            account=request.account, actor=request.user, membership_id=membership_id, role=form.cleaned_data["role"]
        ),
        "Role changed.",
    )


@account_page(methods=("POST",))
def member_remove_view(request, membership_id: int):
    leaving = request.membership.pk == membership_id
    if not leaving:  # anyone may leave; removing someone else is managing the team
        page_require(request, Action.MEMBERS_MANAGE)
    response = _run(
        request,
        lambda: services.member_remove(account=request.account, actor=request.user, membership_id=membership_id),
        "You left the account." if leaving else "Member removed.",
    )
    if leaving:
        request.session.pop(SESSION_ACCOUNT_KEY, None)
        return redirect("home")
    return response


@members_post
def invitation_cancel_view(request, invitation_id: int):
    return _run(
        request,
        lambda: services.invitation_cancel(account=request.account, actor=request.user, invitation_id=invitation_id),
        "Invitation cancelled.",
    )


@keys_post
def api_key_create_view(request):
    form = ApiKeyForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, "Give the key a name and choose its scope (read, or write).")

    def create():
        key, raw = services.api_key_create(
            account=request.account,
            actor=request.user,
            name=form.cleaned_data["name"],
            scope=form.cleaned_data["scope"],
        )
        # Shown exactly once, on the next page view, then gone from the session.
        request.session["new_api_key"] = {"name": key.name, "secret": raw, "scope": key.scope}

    return page_post(request, create, to="accounts:team", told=AccountError)


@keys_post
def api_key_revoke_view(request, key_id: int):
    return _run(
        request,
        lambda: services.api_key_revoke(account=request.account, actor=request.user, key_id=key_id),
        "API key revoked. Integrations using it now get 401.",
    )


@account_page(page_check(Action.ACCOUNT_DELETE), methods=("POST",))
def account_delete_view(request):
    """The Team page's danger zone: owners delete the account after typing its name. A wrong
    or missing name re-renders the page with the form's error (400)."""
    account = request.account
    form = AccountDeleteForm(request.POST)
    form.is_valid()
    try:
        services.account_delete_confirmation_check(account=account, confirm=form.cleaned_data.get("confirm", ""))
        services.account_delete(account=account, actor=request.user)
    except AccountError as exc:
        if exc.code == CoreErrorCode.FORBIDDEN:
            raise PageForbidden(exc.message) from exc
        _form_error(form, exc)
        return render(request, "accounts/team.html", _team_context(request, delete_form=form), status=400)
    # Land in the next team the person belongs to, else on "create a team".
    remaining = [m for m in request.memberships if m.account_id != account.pk]
    if remaining:
        request.session[SESSION_ACCOUNT_KEY] = remaining[0].account_id
        services.user_last_account_set(user=request.user, account_id=remaining[0].account_id)
    else:
        request.session.pop(SESSION_ACCOUNT_KEY, None)
    messages.success(
        request,
        f"Deleted {account.name}. Its members and API keys lost access at once; its "
        "documents and conversations are being removed.",
    )
    return redirect("home")
