"""Account pages: sign-up, login, switching accounts, team and API keys (thin views)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts import selectors, services
from accounts.errors import AccountError
from accounts.forms import AccountForm, ApiKeyForm, InviteForm, LoginForm, RoleForm, SignupForm
from accounts.resolution import SESSION_ACCOUNT_KEY


def _form_error(form, exc: AccountError):
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)


def signup_view(request):
    if request.user.is_authenticated:
        return redirect("home")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user, account = services.signup(**form.cleaned_data)
        except AccountError as exc:
            _form_error(form, exc)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            request.session[SESSION_ACCOUNT_KEY] = account.pk
            messages.success(request, f"Welcome to Groundwork. {account.name} is ready.")
            return redirect("home")
    return render(request, "accounts/signup.html", {"form": form})


class LoginView(auth_views.LoginView):
    template_name = "accounts/login.html"
    authentication_form = LoginForm
    redirect_authenticated_user = True


@login_required
@require_POST
def account_create_view(request):
    form = AccountForm(request.POST)
    if form.is_valid():
        try:
            account = services.account_create(name=form.cleaned_data["name"], owner=request.user)
        except AccountError as exc:
            messages.error(request, exc.message)
        else:
            request.session[SESSION_ACCOUNT_KEY] = account.pk
            messages.success(request, f"Created {account.name}.")
    return redirect("home")


@login_required
@require_POST
def account_switch_view(request):
    """Switch the session to another account the user belongs to (404 for any other id)."""
    try:
        account_id = int(request.POST.get("account_id", ""))
    except ValueError:
        raise Http404
    membership = next((m for m in request.memberships if m.account_id == account_id), None)
    if membership is None:
        raise Http404
    request.session[SESSION_ACCOUNT_KEY] = account_id
    messages.success(request, f"Switched to {membership.account.name}.")
    return redirect("home")


def _require_account(request):
    if request.account is None:
        raise Http404


@login_required
def team_view(request):
    _require_account(request)
    if not request.membership.can_manage_team:
        return render(request, "accounts/forbidden.html", status=403)
    context = {
        "members": selectors.member_list(account=request.account),
        "invitations": selectors.invitation_list(account=request.account),
        "api_keys": selectors.api_key_list(account=request.account),
        "invite_form": InviteForm(), "key_form": ApiKeyForm(), "role_form": RoleForm(),
        "new_key": request.session.pop("new_api_key", None),
    }
    return render(request, "accounts/team.html", context)


def _run(request, action, success: str):
    try:
        action()
    except AccountError as exc:
        if exc.status == 404:
            raise Http404
        messages.error(request, exc.message)
    else:
        messages.success(request, success)


@login_required
@require_POST
def member_invite_view(request):
    _require_account(request)
    form = InviteForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Enter a valid email address and choose a role.")
        return redirect("accounts:team")
    email = form.cleaned_data["email"]
    _run(request, lambda: services.member_invite(account=request.account, actor=request.user, **form.cleaned_data),
         f"Invited {email}.")
    return redirect("accounts:team")


@login_required
@require_POST
def member_role_view(request, membership_id: int):
    _require_account(request)
    form = RoleForm(request.POST)
    if form.is_valid():
        _run(request, lambda: services.member_change_role(
            account=request.account, actor=request.user, membership_id=membership_id, role=form.cleaned_data["role"]),
            "Role changed.")
    return redirect("accounts:team")


@login_required
@require_POST
def member_remove_view(request, membership_id: int):
    _require_account(request)
    leaving = request.membership.pk == membership_id
    _run(request, lambda: services.member_remove(account=request.account, actor=request.user,
                                                 membership_id=membership_id),
         "You left the account." if leaving else "Member removed.")
    if leaving:
        request.session.pop(SESSION_ACCOUNT_KEY, None)
        return redirect("home")
    return redirect("accounts:team")


@login_required
@require_POST
def invitation_cancel_view(request, invitation_id: int):
    _require_account(request)
    _run(request, lambda: services.invitation_cancel(account=request.account, actor=request.user,
                                                     invitation_id=invitation_id), "Invitation cancelled.")
    return redirect("accounts:team")


@login_required
@require_POST
def api_key_create_view(request):
    _require_account(request)
    form = ApiKeyForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give the key a name.")
        return redirect("accounts:team")
    try:
        key, raw = services.api_key_create(account=request.account, actor=request.user, name=form.cleaned_data["name"])
    except AccountError as exc:
        messages.error(request, exc.message)
    else:
        # Shown exactly once, on the next page view, then gone from the session.
        request.session["new_api_key"] = {"name": key.name, "secret": raw}
    return redirect("accounts:team")


@login_required
@require_POST
def api_key_revoke_view(request, key_id: int):
    _require_account(request)
    _run(request, lambda: services.api_key_revoke(account=request.account, actor=request.user, key_id=key_id),
         "API key revoked. Integrations using it now get 401.")
    return redirect("accounts:team")
