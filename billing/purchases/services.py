"""Buying credits: a Checkout Session for an owner, and Stripe's events applied once each.

Guarantees:
- A purchase's credits are granted once: through billing.services.credits_grant, keyed by the
  Stripe event id (a replayed event finds its ledger entry), and only while the purchase is
  pending (a second event for the same session, e.g. async_payment_succeeded after completed,
  records its id and grants nothing). Each event's id is kept on the purchase under its row
  lock, so one event changes a purchase once, whatever the order and concurrency of deliveries.
- A purchase is found by its Checkout Session's id (or, for a refund, its payment intent's),
  which Stripe sends and only this server's Purchase rows know, never by the account the
  metadata names: a session of account A credits A, whatever its metadata says.
- A refund takes back the purchase's granted credits in proportion to what was refunded so far,
  at most the balance (billing.services.credits_take_back): the balance never goes negative.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import stripe
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import Account
from audit.services import audit_record
from billing import references
from billing.error_codes import BillingErrorCode
from billing.errors import BillingError
from billing.money import Money, purchase_amount_minor
from billing.purchases import stripe_api
from billing.purchases.models import Purchase, PurchaseStatus
from billing.services import credits_grant, credits_take_back
from core.error_codes import CoreErrorCode
from core.tenancy import account_context, dangerously_bypass_tenancy
from core.text import whole_number

logger = logging.getLogger("groundwork.billing.stripe")


def credits_parse(value) -> int:
    """The number of credits to buy: a whole number (the page also takes "50,000"; core.text's
    rule for a number a person types) within CREDITS_PURCHASE_MIN..CREDITS_PURCHASE_MAX;
    BillingError invalid_amount (400, field "credits") otherwise."""
    low, high = settings.CREDITS_PURCHASE_MIN, settings.CREDITS_PURCHASE_MAX
    number = whole_number(value, minimum=low, maximum=high)
    if number is None:
        raise BillingError(
            CoreErrorCode.INVALID_AMOUNT,
            f"Credits to buy must be a whole number from {low:,} to {high:,}.",
            field="credits",
        )
    return number


@dataclass(frozen=True)
class Checkout:
    purchase: Purchase
    url: str


def purchase_checkout_start(*, account: Account, actor, credits, success_url: str, cancel_url: str) -> Checkout:
    """Open a Stripe Checkout Session (mode payment) for `credits` and record the pending
    purchase; the caller sends the buyer to `url`. Refused: stripe_not_configured (503),
    invalid_amount (400), stripe_unavailable (502, nothing recorded)."""
    stripe_api.require_configured()
    credits = credits_parse(credits)
    amount, currency = purchase_amount_minor(credits), settings.STRIPE_CURRENCY
    purchase = Purchase(
        account=account,
        credits=credits,
        amount_cents=amount,
        currency=currency,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    reference = str(purchase.public_id)
    session = stripe_api.checkout_session_create(
        idempotency_key=f"groundwork-purchase-{reference}",
        params={
            "mode": "payment",
            "line_items": [
                {
                    "quantity": 1,
                    "price_data": {
                        "currency": currency,
                        "unit_amount": amount,
                        "product_data": {
                            "name": f"{credits:,} Groundwork credits",
                            "description": f"Credits for {account.name}",
                        },
                    },
                }
            ],
            "client_reference_id": reference,
            "metadata": {"account_id": str(account.pk), "credits": str(credits), "purchase": reference},
            "payment_intent_data": {"metadata": {"account_id": str(account.pk), "purchase": reference}},
            "success_url": success_url,
            "cancel_url": cancel_url,
            **({"customer_email": actor.email} if getattr(actor, "email", "") else {}),
        },
    )
    if not session.id or not session.url:
        raise BillingError(
            BillingErrorCode.STRIPE_UNAVAILABLE,
            "Stripe answered without a checkout address. Nothing was charged; try again.",
            status=502,
        )
    with transaction.atomic():
        purchase.stripe_session_id = session.id
        purchase.save()
        audit_record(
            account=account,
            action="credits.checkout",
            actor=actor,
            target=f"{credits:,} credits",
            detail={"amount": str(purchase.amount), "session": session.id},
        )
    return Checkout(purchase=purchase, url=session.url)


# --- the webhook -------------------------------------------------------------------------


class WebhookRefused(Exception):
    """The request is not an event Stripe signed for us: 400, and nothing is written."""


def purchase_event_handle(*, payload: bytes, signature: str | None) -> str:
    """Apply one webhook delivery; returns what happened (for the log and the response).
    WebhookRefused for a missing, wrong or stale signature and for a body that is not an
    event; other event types are ignored."""
    if not stripe_api.configured():
        raise WebhookRefused("Stripe is not configured on this server")
    try:
        event = stripe_api.event_verified(payload=payload, signature=signature)
    except stripe.SignatureVerificationError as exc:
        raise WebhookRefused(f"bad signature: {exc.user_message or exc}") from exc
    except ValueError as exc:
        raise WebhookRefused(f"not a JSON event: {exc}") from exc
    event_id, kind = event.get("id"), event.get("type")
    obj = (event.get("data") or {}).get("object") if isinstance(event.get("data"), dict) else None
    if not isinstance(event_id, str) or not 0 < len(event_id) <= 200 or not isinstance(obj, dict):
        raise WebhookRefused("the event has no id or no data.object")
    handler = _HANDLERS.get(kind)
    if handler is None:
        return "ignored"
    outcome = handler(event_id, obj)
    logger.info("stripe event %s (%s): %s", event_id, kind, outcome)
    return outcome


def _located(**lookup) -> tuple[int, int] | None:
    """(purchase id, account id) of the purchase a Stripe object names, found across accounts:
    the webhook comes with no account."""
    value = next(iter(lookup.values()))
    if not isinstance(value, str) or not value:
        return None
    with dangerously_bypass_tenancy(reason="stripe webhook: find the purchase a Stripe event names"):
        return Purchase.all_accounts.filter(**lookup).values_list("pk", "account_id").first()


def _locked(purchase_id: int, account_id: int) -> Purchase:
    return Purchase.objects.for_account(account_id).select_for_update().get(pk=purchase_id)


def _id_of(value) -> str:
    """An expandable field's id (Stripe sends either the id or the object)."""
    return value.get("id", "") if isinstance(value, dict) else (value or "")


def _session_paid(event_id: str, session: dict) -> str:
    found = _located(stripe_session_id=session.get("id"))
    if found is None:
        logger.warning("stripe event %s: checkout session %r is none of ours", event_id, session.get("id"))
        return "unknown_session"
    purchase_id, account_id = found
    metadata = session.get("metadata")
    claimed = metadata.get("account_id") if isinstance(metadata, dict) else None
    if claimed not in (None, "", str(account_id)):
        # The session is bound to the account that opened it; metadata cannot move it.
        logger.warning(
            "stripe event %s: metadata names account %r, the session is account %s's", event_id, claimed, account_id
        )
    account = Account.objects.get(pk=account_id)
    with account_context(account_id=account_id):
        purchase = _locked(purchase_id, account_id)
        if event_id in purchase.event_ids:
            return "duplicate"
        purchase.event_ids.append(event_id)
        outcome = _grant_if_due(purchase, account=account, event_id=event_id, session=session)
        purchase.save()
    if outcome == "granted" and not purchase.receipt_url:
        _receipt_record(purchase_id, account_id, stripe_api.checkout_session_receipt_url(purchase.stripe_session_id))
    return outcome


def _grant_if_due(purchase: Purchase, *, account: Account, event_id: str, session: dict) -> str:
    if session.get("payment_status") != "paid":
        return "not_paid_yet"
    if purchase.status != PurchaseStatus.PENDING:
        return f"already_{purchase.status}"
    if session.get("amount_total") != purchase.amount_cents or (session.get("currency") or "") != purchase.currency:
        logger.error(
            "stripe event %s: session %s paid %r %r, the purchase is %s %s: not granted",
            event_id,
            purchase.stripe_session_id,
            session.get("amount_total"),
            session.get("currency"),
            purchase.amount_cents,
            purchase.currency,
        )
        return "amount_mismatch"
    credits_grant(
        account=account,
        amount=purchase.credits,
        key=event_id,
        reference=references.purchase(purchase.pk),
        reason=f"bought {purchase.credits:,} credits ({purchase.amount})",
    )
    purchase.status, purchase.paid_at, purchase.credits_granted = PurchaseStatus.PAID, timezone.now(), purchase.credits
    purchase.payment_intent_id = _id_of(session.get("payment_intent"))
    return "granted"


def _receipt_record(purchase_id: int, account_id: int, url: str) -> None:
    if url:
        with account_context(account_id=account_id):
            Purchase.objects.for_account(account_id).filter(pk=purchase_id, receipt_url="").update(receipt_url=url)


def _session_closed(status: str):
    def handle(event_id: str, session: dict) -> str:
        found = _located(stripe_session_id=session.get("id"))
        if found is None:
            return "unknown_session"
        with account_context(account_id=found[1]):
            purchase = _locked(*found)
            if event_id in purchase.event_ids:
                return "duplicate"
            purchase.event_ids.append(event_id)
            changed = purchase.status == PurchaseStatus.PENDING
            if changed:
                purchase.status = status
            purchase.save()
        return status if changed else "unchanged"

    return handle


def _charge_refunded(event_id: str, charge: dict) -> str:
    found = _located(payment_intent_id=_id_of(charge.get("payment_intent")))
    if found is None:
        logger.warning("stripe event %s: charge %r pays none of our purchases", event_id, charge.get("id"))
        return "unknown_charge"
    purchase_id, account_id = found
    account = Account.objects.get(pk=account_id)
    with account_context(account_id=account_id):
        purchase = _locked(purchase_id, account_id)
        if event_id in purchase.event_ids:
            return "duplicate"
        purchase.event_ids.append(event_id)
        refunded = charge.get("amount_refunded")
        refunded = (
            min(refunded, purchase.amount_cents)
            if isinstance(refunded, int) and not isinstance(refunded, bool) and refunded > 0
            else 0
        )
        outcome = "nothing_new"
        if refunded > purchase.refunded_cents:
            # Proportional to the total refunded so far, less what earlier refunds accounted
            # for: partial refunds add up to exactly the purchase's credits at a full refund.
            before = purchase.credits_granted * purchase.refunded_cents // purchase.amount_cents
            due = purchase.credits_granted * refunded // purchase.amount_cents - before
            entry = (
                credits_take_back(
                    account=account,
                    amount=due,
                    key=event_id,
                    reference=references.purchase(purchase.pk),
                    reason=f"refund of {Money.of_minor(refunded, purchase.currency) - purchase.refunded}"
                    f" for {purchase.credits:,} bought credits",
                )
                if due > 0
                else None
            )
            purchase.credits_taken_back += -entry.delta if entry is not None else 0
            purchase.refunded_cents = refunded
            purchase.status = (
                PurchaseStatus.REFUNDED if refunded >= purchase.amount_cents else PurchaseStatus.PARTIALLY_REFUNDED
            )
            outcome = f"took_back_{-entry.delta if entry is not None else 0}"
        if not purchase.receipt_url and isinstance(charge.get("receipt_url"), str):
            purchase.receipt_url = charge["receipt_url"][:1000]
        purchase.save()
    return outcome


_HANDLERS = {
    "checkout.session.completed": _session_paid,
    "checkout.session.async_payment_succeeded": _session_paid,
    "checkout.session.async_payment_failed": _session_closed(PurchaseStatus.FAILED),
    "checkout.session.expired": _session_closed(PurchaseStatus.EXPIRED),
    "charge.refunded": _charge_refunded,
}
