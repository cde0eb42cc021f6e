"""What the Credits page shows of buying (billing.views renders it and takes the Buy form),
and Stripe's webhook."""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from accounts.models import Role
from accounts.permissions import Action, principal_may
from accounts.selectors import member_list
from billing import pricing
from billing.money import credits_price, purchase_price
from billing.purchases import stripe_api
from billing.purchases.selectors import purchase_by_session, purchase_list
from billing.purchases.services import WebhookRefused, purchase_event_handle
from core.errors import GroundworkError

logger = logging.getLogger("groundwork.billing.stripe")
PURCHASES_SHOWN = 20


def checkout_urls(request) -> tuple[str, str]:
    """Where Stripe sends the buyer back: the Credits page, saying how it went. Stripe fills
    in {CHECKOUT_SESSION_ID}."""
    credits = request.build_absolute_uri(reverse("billing:credits"))
    return (f"{credits}?checkout=done&session={{CHECKOUT_SESSION_ID}}#buy", f"{credits}?checkout=cancelled#buy")


def buy_context(request, *, form: dict | None = None, error: GroundworkError | None = None) -> dict:
    """The Credits page's Buy section and receipts (everyone who sees credits sees them; only
    owners get the form)."""
    account = request.account
    packs = [{"credits": credits, "price": purchase_price(credits)} for credits in settings.CREDIT_PACKS]
    purchases = list(purchase_list(account=account)[:PURCHASES_SHOWN])
    configured, may_buy = stripe_api.configured(), principal_may(request, Action.BILLING_MANAGE)
    return {
        "buy": {
            "configured": configured,
            "may_buy": may_buy,
            "operator": _runs_the_server(request),
            "packs": packs,
            "min": settings.CREDITS_PURCHASE_MIN,
            "max": settings.CREDITS_PURCHASE_MAX,
            "price_per_1k": credits_price(1000),
            "form": form or {"credits": str(packs[0]["credits"]) if packs else "custom", "custom_credits": ""},
            "error": error,
            "returned": _returned(request),
            "purchases": purchases,
            "owners": [m.user.email for m in _owners(account)] if configured and not may_buy else [],
        }
    }


def prices_shown(*, configured: bool) -> list[dict]:
    """The prices in effect (billing.pricing), each with what its 1,000 tokens cost in money
    when credits can be bought here (None otherwise: credits have no price on this server)."""
    return [
        {
            "kind": p.kind,
            "model": p.model,
            "credits_per_1k": p.credits_per_1k,
            "money_per_1k": credits_price(p.credits_per_1k) if configured else None,
        }
        for p in pricing.prices_in_effect()
    ]


def _runs_the_server(request) -> bool:
    """Whether the person is (likely) the server's operator: staff, or a development or
    `make run` install on their own machine. They are told what to set, not to ask support."""
    return bool(getattr(request.user, "is_staff", False) or settings.DEBUG or settings.LOCAL_RUN)


def _owners(account):
    return member_list(account=account).filter(role=Role.OWNER).select_related("user").order_by("user__email")


def _returned(request) -> dict | None:
    """What the page says when Stripe sends the buyer back."""
    checkout = request.GET.get("checkout")
    if checkout == "cancelled":
        return {"kind": "info", "text": "Checkout cancelled: nothing was charged."}
    if checkout != "done":
        return None
    purchase = purchase_by_session(account=request.account, session_id=request.GET.get("session", "")[:255])
    if purchase is None:
        return None
    if purchase.credits_granted:
        return {"kind": "success", "text": f"Thank you: {purchase.credits:,} credits were added."}
    return {
        "kind": "info",
        "text": f"Payment received: the {purchase.credits:,} credits appear here as soon as "
        "Stripe confirms it (usually within seconds; reload the page).",
    }


@csrf_exempt
@require_POST
def stripe_webhook_view(request):
    """POST /billing/stripe/webhook/: Stripe's events. No session, no account from the
    request: the signature says it is Stripe, the event's session id says whose purchase."""
    try:
        outcome = purchase_event_handle(payload=request.body, signature=request.headers.get("Stripe-Signature"))
    except WebhookRefused as exc:
        logger.warning("stripe webhook refused from %s: %s", request.META.get("REMOTE_ADDR"), exc)
        return HttpResponse(f"Refused: {exc}\n", status=400, content_type="text/plain")
    return JsonResponse({"received": True, "outcome": outcome})
