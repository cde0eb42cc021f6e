"""The credits page: balance, a daily usage chart (server-rendered SVG) and the ledger."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse

from accounts.permissions import Action, page_check, principal_may
from billing import dashboard, pricing, references
from billing.alerts import billing_settings_get, billing_settings_update
from billing.budgets import budget_remove, budget_set
from billing.context_processors import member_budgets
from billing.models import BudgetPeriod, Kind
from billing.purchases import stripe_api
from billing.purchases.services import purchase_checkout_start
from billing.purchases.views import buy_context, checkout_urls, prices_shown
from billing.selectors import balance_get
from core.errors import GroundworkError
from core.pages import account_page

ENTRIES_PER_PAGE = 25


def _reference_link(reference: str) -> str | None:
    """Where a ledger reference points in the dashboard, when it names a page."""
    parsed = references.parse(reference)
    if parsed.kind == "document":
        return reverse("documents:document", args=[parsed.id])
    if parsed.kind == "conversation":
        return reverse("chat:conversation", args=[parsed.id])
    return None


@account_page()
def credits_view(request):
    return _credits_page(request)


def _credits_page(
    request,
    *,
    billing_form: dict | None = None,
    billing_error: GroundworkError | None = None,
    buy_form: dict | None = None,
    buy_error: GroundworkError | None = None,
    status: int = 200,
):
    account = request.account
    kind = request.GET.get("kind") or ""
    if kind not in Kind.values:
        kind = ""
    include_holds = request.GET.get("holds") == "1"
    settled = dashboard.shows_settled(kind=kind or None, include_holds=include_holds)
    entries = dashboard.ledger_entries(account=account, kind=kind or None, include_holds=include_holds)
    page = Paginator(entries, ENTRIES_PER_PAGE).get_page(request.GET.get("page"))
    seen = references.as_seen(account=account, references=[entry.reference for entry in page.object_list])
    for entry in page.object_list:
        entry.reference = seen[entry.reference]
        entry.hidden = entry.reference.endswith(f":{references.HIDDEN}")
        entry.link = _reference_link(entry.reference)
        entry.balance_shown = entry.settled_balance if settled else entry.balance_after
        entry.reason = (entry.metadata or {}).get("reason", "") if isinstance(entry.metadata, dict) else ""
        entry.price_note = pricing.price_note(entry)
    balance = balance_get(account=account)
    held = dashboard.held_credits(account=account)
    return render(
        request,
        "billing/credits.html",
        {
            "balance": balance,
            "held": held,
            "settled_balance": balance + held,
            "settled": settled,
            "chart": dashboard.usage_chart(account=account, days=30),
            "page": page,
            "kind": kind,
            "kinds": Kind.choices,
            "include_holds": include_holds,
            "budgets": member_budgets(request),
            "prices": prices_shown(configured=stripe_api.configured()),
            **_billing_context(request, form=billing_form, error=billing_error),
            **buy_context(request, form=buy_form, error=buy_error),
        },
        status=status,
    )


def _billing_context(request, *, form: dict | None, error: GroundworkError | None) -> dict:
    """The owners' Billing section (billing.manage); nothing for anyone else."""
    if not principal_may(request, Action.BILLING_MANAGE):
        return {}
    current = billing_settings_get(account=request.account)
    if form is None:
        threshold = current.low_balance_threshold if current else None
        form = {
            "contact_email": current.contact_email if current else "",
            "low_balance_threshold": "" if threshold is None else f"{threshold:,}",
        }
    return {
        "billing": {"settings": current, "form": form, "error": error, "error_field": getattr(error, "field", None)}
    }


@account_page(page_check(Action.BILLING_MANAGE), methods=("POST",))
def billing_settings_view(request):
    """The Credits page's Billing form (owners). Bad input: the page again, 400, saying why."""
    form = {
        "contact_email": request.POST.get("contact_email", ""),
        "low_balance_threshold": request.POST.get("low_balance_threshold", ""),
    }
    try:
        billing_settings_update(account=request.account, actor=request.user, **form)
    except GroundworkError as exc:
        if exc.status == 403:
            raise PermissionDenied(exc.message) from exc
        return _credits_page(request, billing_form=form, billing_error=exc, status=400)
    messages.success(request, "Billing settings saved.")
    return redirect(reverse("billing:credits") + "#billing")


@account_page(page_check(Action.BILLING_MANAGE), methods=("POST",))
def buy_view(request):
    """Credits → Buy: a pack (`credits`) or `credits=custom` with `custom_credits`, then off to
    Stripe's checkout. Bad input: the page again, 400, saying why."""
    form = {"credits": request.POST.get("credits", ""), "custom_credits": request.POST.get("custom_credits", "")}
    # An amount typed in wins over a pack left selected (the field is empty unless typed in).
    custom = form["credits"] == "custom" or form["custom_credits"].strip()
    credits = form["custom_credits"] if custom else form["credits"]
    success_url, cancel_url = checkout_urls(request)
    try:
        checkout = purchase_checkout_start(
            account=request.account, actor=request.user, credits=credits, success_url=success_url, cancel_url=cancel_url
        )
    except GroundworkError as exc:
        if exc.status == 403:
            raise PermissionDenied(exc.message) from exc
        return _credits_page(request, buy_form=form, buy_error=exc, status=400 if exc.status < 500 else exc.status)
    return HttpResponseRedirect(checkout.url, status=303)


def _team_budgets():
    return redirect(reverse("accounts:team") + "#budgets")


def _budget_refused(request, exc: GroundworkError):
    """A refused budget form: 404 for another account's member, key or budget; the 403 page
    for a role that may not; else the reason as a message on the Team page."""
    if exc.status == 404:
        raise Http404
    if exc.status == 403:
        raise PermissionDenied(exc.message)
    messages.error(request, exc.message)
    return _team_budgets()


@account_page(methods=("POST",))
def budget_set_view(request):
    """The Team page's form: target "user:<id>" or "key:<id>", period, limit ("5,000" is fine)."""
    kind, _, target_id = request.POST.get("target", "").partition(":")
    if kind not in ("user", "key") or not target_id:
        messages.error(request, "Choose a member or an API key for the budget.")
        return _team_budgets()
    try:
        budget = budget_set(
            account=request.account,
            actor=request.user,
            period=request.POST.get("period", ""),
            limit=request.POST.get("limit", ""),
            user_id=target_id if kind == "user" else None,
            api_key_id=target_id if kind == "key" else None,
        )
    except GroundworkError as exc:
        return _budget_refused(request, exc)
    who = budget.user.email if budget.user_id else f"API key {budget.api_key}"
    messages.success(
        request,
        f"{who} may spend {budget.limit:,} credits per "
        f"{'day' if budget.period == BudgetPeriod.DAY else 'month'} (UTC).",
    )
    return _team_budgets()


@account_page(methods=("POST",))
def budget_remove_view(request, budget_id: int):
    try:
        budget_remove(account=request.account, actor=request.user, budget_id=budget_id)
    except GroundworkError as exc:
        return _budget_refused(request, exc)
    messages.success(request, "Budget removed.")
    return _team_budgets()
