"""The Team page's provisioning forms: owners make a SCIM token (shown once) and revoke it."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.errors import AccountError
from accounts.permissions import Action, page_account
from accounts.scim import services

NEW_TOKEN_SESSION_KEY = "new_scim_token"


def _owner_account(request):
    return page_account(request, Action.SCIM_MANAGE)


@login_required
@require_POST
def scim_token_create_view(request):
    account = _owner_account(request)
    try:
        _, raw = services.scim_token_create(account=account, actor=request.user, name=request.POST.get("name", ""))
    except AccountError as exc:
        messages.error(request, exc.message)
        return redirect("accounts:team")
    # Shown exactly once, on the next view of the Team page, then gone from the session.
    request.session[NEW_TOKEN_SESSION_KEY] = raw
    return redirect("accounts:team")


@login_required
@require_POST
def scim_token_revoke_view(request, token_id: int):
    account = _owner_account(request)
    try:
        services.scim_token_revoke(account=account, actor=request.user, token_id=token_id)
    except AccountError as exc:
        if exc.status == 404:
            raise Http404 from exc
        raise
    messages.success(request, "SCIM token revoked. Your identity provider now gets 401 with it.")
    return redirect("accounts:team")
