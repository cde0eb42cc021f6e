"""The Team page's provisioning forms: owners make a SCIM token (shown once) and revoke it."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect

from accounts.errors import AccountError
from accounts.permissions import Action, page_check
from accounts.scim import services
from core.pages import account_page, page_post

NEW_TOKEN_SESSION_KEY = "new_scim_token"

owners_page = account_page(page_check(Action.SCIM_MANAGE), methods=("POST",))


@owners_page
def scim_token_create_view(request):
    def create():
        _, raw = services.scim_token_create(
            account=request.account, actor=request.user, name=request.POST.get("name", "")
        )
        # Shown exactly once, on the next view of the Team page, then gone from the session.
        request.session[NEW_TOKEN_SESSION_KEY] = raw

    return page_post(request, create, to="accounts:team", told=AccountError)


@owners_page
def scim_token_revoke_view(request, token_id: int):
    try:
        services.scim_token_revoke(account=request.account, actor=request.user, token_id=token_id)
    except AccountError as exc:
        if exc.status == 404:
            raise Http404 from exc
        raise
    messages.success(request, "SCIM token revoked. Your identity provider now gets 401 with it.")
    return redirect("accounts:team")
