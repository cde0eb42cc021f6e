"""The Team page's verified domains (owners), and the page the emailed link opens."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render

from accounts.domains import services
from accounts.errors import AccountError
from accounts.permissions import Action, page_check
from core.error_codes import CoreErrorCode
from core.pages import account_page, page_post

owners_page = account_page(page_check(Action.DOMAINS_MANAGE), methods=("POST",))


@owners_page
def domain_add_view(request):
    return page_post(
        request,
        lambda: services.domain_verification_send(
            account=request.account,
            actor=request.user,
            domain=request.POST.get("domain", ""),
            mailbox=request.POST.get("mailbox", ""),
            site_url=request.build_absolute_uri("/").rstrip("/"),
        ),
        to="accounts:team",
        told=AccountError,
        success=lambda row: (
            f"We emailed {row.verification_address} a link: {row.domain} is verified when it is opened."
        ),
    )


@owners_page
def domain_remove_view(request, domain_id: int):
    try:
        services.domain_remove(account=request.account, actor=request.user, domain_id=domain_id)
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
        row = (
            services.domain_verify(token=token) if request.method == "POST" else services.domain_for_token(token=token)
        )
    except AccountError as exc:
        return render(
            request, "accounts/link_refused.html", {"title": "Domain not verified", "error": exc}, status=exc.status
        )
    return render(request, "accounts/domains/verify.html", {"row": row, "done": request.method == "POST"})
