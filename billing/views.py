"""The credits page: balance, a daily usage chart (server-rendered SVG) and the ledger."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse

from billing import dashboard, references
from billing.models import Kind
from billing.selectors import balance_get

ENTRIES_PER_PAGE = 25


def _reference_link(reference: str) -> str | None:
    """Where a ledger reference points in the dashboard, when it names a page."""
    parsed = references.parse(reference)
    if parsed.kind == "document":
        return reverse("documents:document", args=[parsed.id])
    if parsed.kind == "conversation":
        return reverse("chat:conversation", args=[parsed.id])
    return None


@login_required
def credits_view(request):
    if request.account is None:
        raise Http404
    account = request.account
    kind = request.GET.get("kind") or ""
    if kind not in Kind.values:
        kind = ""
    include_holds = request.GET.get("holds") == "1"
    settled = dashboard.shows_settled(kind=kind or None, include_holds=include_holds)
    entries = dashboard.ledger_entries(account=account, kind=kind or None, include_holds=include_holds)
    page = Paginator(entries, ENTRIES_PER_PAGE).get_page(request.GET.get("page"))
    for entry in page.object_list:
        entry.link = _reference_link(entry.reference)
        entry.balance_shown = entry.settled_balance if settled else entry.balance_after
        entry.reason = (entry.metadata or {}).get("reason", "") if isinstance(entry.metadata, dict) else ""
    balance = balance_get(account=account)
    held = dashboard.held_credits(account=account)
    return render(request, "billing/credits.html", {
        "balance": balance, "held": held, "settled_balance": balance + held, "settled": settled,
        "chart": dashboard.usage_chart(account=account, days=30),
        "page": page, "kind": kind, "kinds": Kind.choices, "include_holds": include_holds,
    })
