"""The "Your settings" page, the sign-in's code step and the owners' team rename (thin views:
a form, one service, a message)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import HASH_SESSION_KEY, login
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.errors import AccountError
from accounts.permissions import Action, page_check
from accounts.profile import services, two_factor
from accounts.profile.forms import (
    CodeForm,
    EmailChangeForm,
    NameForm,
    PasswordChangeForm,
    TeamRenameForm,
    TwoFactorOffForm,
)
from accounts.resolution import SESSION_ACCOUNT_KEY
from core.pages import account_page, form_round_trip, page_post

RECOVERY_CODES_KEY = "new_recovery_codes"  # shown (and downloadable) until the person says they saved them
TEMPLATE = "accounts/settings.html"


def _site_url(request) -> str:
    return request.build_absolute_uri("/").rstrip("/")


def session_keep(request, user) -> None:
    """Keep this session signed in after its user's session hash changed (a new password,
    other sessions ended). Saved at once, in the change's transaction, so the sockets of
    this session find it valid when they re-check after the commit. The key is kept (no
    cycle_key) so this session's open sockets stay open."""
    request.session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    request.session.save()
    request.user = user


def _context(request, **forms) -> dict:
    user = request.user
    pending = None if two_factor.two_factor_enabled(user) else two_factor.totp_pending(user)
    page_forms = {
        "name_form": forms.get("name_form") or NameForm(initial={"full_name": user.full_name}),
        "email_form": forms.get("email_form") or EmailChangeForm(),
        "password_form": forms.get("password_form") or PasswordChangeForm(),
        "confirm_form": forms.get("confirm_form") or CodeForm(),
        "renew_form": forms.get("renew_form") or CodeForm(),
        "off_form": forms.get("off_form") or TwoFactorOffForm(),
    }
    for name, form in page_forms.items():  # several forms on one page: ids of their own
        form.auto_id = name.removesuffix("_form") + "_%s"
    return {
        **page_forms,
        "two_factor_on": two_factor.two_factor_enabled(user),
        "totp_pending": pending is not None,
        "totp_qr": two_factor.totp_qr_svg(pending) if pending else "",
        "totp_secret": two_factor.totp_secret(pending) if pending else "",
        "recovery_codes": request.session.get(RECOVERY_CODES_KEY),
    }


def _settings_form(request, form_name: str, form, act, success):
    """One form of the settings page (core.pages.form_round_trip): refused, the page again
    with the reason on that form; done, the message on the page."""

    def settings_page(form, status):
        return render(request, TEMPLATE, _context(request, **{form_name: form}), status=status)

    return form_round_trip(request, form, act=act, success=success, to="accounts:settings", rerender=settings_page)


@login_required
def settings_view(request):
    return render(request, TEMPLATE, _context(request))


@login_required
@require_POST
def name_change_view(request):
    def save(data):
        services.user_name_change(user=request.user, full_name=data["full_name"])

    return _settings_form(request, "name_form", NameForm(request.POST), save, "Your name is saved.")


@login_required
@require_POST
def email_change_view(request):
    def send(data):
        return services.user_email_change_request(
            user=request.user, new_email=data["new_email"], password=data["password"], site_url=_site_url(request)
        )

    return _settings_form(
        request,
        "email_form",
        EmailChangeForm(request.POST),
        send,
        lambda new_email: (
            f"We sent a link to {new_email}. Your address changes when you open it; "
            f"until then you sign in as {request.user.email}."
        ),
    )


def email_change_confirm_view(request, token: str):
    """The emailed link (GET works: opening the link is the proof, as for verification)."""
    try:
        user = services.user_email_change_confirm(token=token)
    except AccountError as exc:
        return render(
            request,
            "accounts/link_refused.html",
            {"title": "Email address not changed", "error": exc},
            status=exc.status,
        )
    messages.success(request, f"Your email address is now {user.email}: sign in with it from now on.")
    if request.user.is_authenticated and request.user.pk == user.pk:
        return redirect("accounts:settings")
    return redirect("accounts:login")


@login_required
@require_POST
def password_change_view(request):
    def change(data):
        with transaction.atomic():  # the session is kept before the sockets are told (on commit)
            session_keep(
                request,
                services.user_password_change(
                    user=request.user, current_password=data["current_password"], new_password=data["new_password"]
                ),
            )

    return _settings_form(
        request,
        "password_form",
        PasswordChangeForm(request.POST),
        change,
        "Your password is changed. Your other sessions were signed out; this one stays.",
    )


@login_required
@require_POST
def sessions_end_view(request):
    with transaction.atomic():  # the session is kept before the sockets are told (on commit)
        session_keep(request, services.user_sessions_end_others(user=request.user))
    messages.success(request, "Every other session of yours is signed out, open chats included. This one stays.")
    return redirect("accounts:settings")


# --- two-factor sign-in ------------------------------------------------------------------------


@login_required
@require_POST
def two_factor_setup_view(request):
    return page_post(
        request, lambda: two_factor.totp_setup_start(user=request.user), to="accounts:settings", told=AccountError
    )


def _recovery_codes_form(request, form_name: str, make, success: str):
    """A code form whose service makes new recovery codes: kept in the session to be shown."""

    def keep(data):
        request.session[RECOVERY_CODES_KEY] = make(request=request, user=request.user, code=data["code"])

    return _settings_form(request, form_name, CodeForm(request.POST), keep, success)


@login_required
@require_POST
def two_factor_confirm_view(request):
    return _recovery_codes_form(
        request,
        "confirm_form",
        two_factor.totp_setup_confirm,
        "Two-factor sign-in is on. Save your recovery codes now: they are shown only this once.",
    )


@login_required
@require_POST
def recovery_codes_renew_view(request):
    return _recovery_codes_form(
        request,
        "renew_form",
        two_factor.recovery_codes_renew,
        "New recovery codes: the old ones no longer work. Save these now.",
    )


@login_required
def recovery_codes_download_view(request):
    codes = request.session.get(RECOVERY_CODES_KEY)
    if not codes:
        raise Http404
    body = (
        "Groundwork recovery codes for " + request.user.email + "\n"
        "Each works once, instead of a code from your authenticator app.\n\n" + "\n".join(codes) + "\n"
    )
    response = HttpResponse(body, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="groundwork-recovery-codes.txt"'
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def recovery_codes_saved_view(request):
    request.session.pop(RECOVERY_CODES_KEY, None)
    return redirect("accounts:settings")


@login_required
@require_POST
def two_factor_off_view(request):
    def disable(data):
        two_factor.two_factor_disable(request=request, user=request.user, code=data["code"], password=data["password"])
        request.session.pop(RECOVERY_CODES_KEY, None)

    return _settings_form(
        request,
        "off_form",
        TwoFactorOffForm(request.POST),
        disable,
        "Two-factor sign-in is off: your password alone signs you in.",
    )


def login_code_view(request):
    """The password sign-in's second step, for people with two-factor sign-in on."""
    waiting = two_factor.login_pending_user(request)
    if waiting is None:
        two_factor.login_pending_clear(request)
        messages.error(request, "Sign in again: the code step expired or was not started.")
        return redirect("accounts:login")
    user, pending = waiting
    form = CodeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            device = two_factor.two_factor_verify(request=request, user=user, code=form.cleaned_data["code"])
        except AccountError as exc:
            form.add_error("code", exc.message)
            return render(request, "accounts/login_code.html", {"form": form}, status=exc.status)
        two_factor.login_pending_clear(request)
        login(request, user, backend=pending["backend"])
        two_factor.session_mark_verified(request, device)
        if user.last_account_id:
            request.session[SESSION_ACCOUNT_KEY] = user.last_account_id
        if device.name == two_factor.RECOVERY_NAME:
            messages.warning(
                request,
                "You signed in with a recovery code; it no longer works. Make new codes on your "
                "settings page when you run low.",
            )
        return redirect(pending.get("next") or "home")
    return render(request, "accounts/login_code.html", {"form": form}, status=400 if form.errors else 200)


# --- the team's name ---------------------------------------------------------------------------


@account_page(page_check(Action.ACCOUNT_RENAME), methods=("POST",))
def team_rename_view(request):
    """Owners rename the session's own account (a posted account id means nothing here)."""
    from accounts.views import _team_context  # the Team page's context, to show the form's error on it

    def team_page(form, status):
        error = " ".join(form.errors.get("name") or form.non_field_errors() or ["Give the team a name."])
        return render(
            request,
            "accounts/team.html",
            _team_context(request, rename_error=error, rename_value=request.POST.get("name", "")),
            status=status,
        )

    return form_round_trip(
        request,
        TeamRenameForm(request.POST),
        act=lambda data: services.account_rename(account=request.account, actor=request.user, name=data["name"]),
        to="accounts:team",
        success=lambda account: f"The team is now called {account.name}.",
        rerender=team_page,
    )
