"""The Team page's verified domains (owners), and the page the emailed link opens."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.domains import services
from accounts.errors import AccountError
from accounts.permissions import Action, page_account
from core.error_codes import CoreErrorCode


def _owner_account(request):
    return page_account(request, Action.DOMAINS_MANAGE)


@login_required
@require_POST
def domain_add_view(request):
    account = _owner_account(request)
    try:
        row = services.domain_verification_send(
            account=account, actor=request.user, domain=request.POST.get("domain", ""),
            mailbox=request.POST.get("mailbox", ""), site_url=request.build_absolute_uri("/").rstrip("/"))
    except AccountError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"We emailed {row.verification_address} a link: {row.domain} is verified when "
                                  "it is opened.")
    return redirect("accounts:team")


@login_required
@require_POST
def domain_remove_view(request, domain_id: int):
    account = _owner_account(request)
    try:
        services.domain_remove(account=account, actor=request.user, domain_id=domain_id)
    except AccountError as exc:
        if exc.code == CoreErrorCode.NOT_FOUND:
            raise Http404 from exc
        raise
    messages.success(request, "Domain removed: your identity provider invites its people from now on.")
    return redirect("accounts:team")


def domain_verify_view(request, token: str):
    """GET: what the link verifies, with a button (no login needed: whoever reads admin@ or
    postmaster@ of the domain). POST: verified."""
    try:
        row = services.domain_verify(token=token) if request.method == "POST" else services.domain_for_token(token=token)
    except AccountError as exc:
        return render(request, "accounts/link_refused.html", {"title": "Domain not verified", "error": exc},
                      status=exc.status)
    return render(request, "accounts/domains/verify.html", {"row": row, "done": request.method == "POST"})
