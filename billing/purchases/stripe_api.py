"""The Stripe API, through Stripe's own SDK: the client, a Checkout Session's creation and
retrieval, and the webhook's signature check. Nothing else here speaks to Stripe."""

from __future__ import annotations

import json

import stripe
from django.conf import settings

from billing.error_codes import BillingErrorCode
from billing.errors import BillingError

TIMEOUT_SECONDS = 20
# A session's payment, as the receipt needs it (the charge has the receipt's address).
EXPAND_CHARGE = ["payment_intent.latest_charge"]


def configured() -> bool:
    return bool(settings.STRIPE_SECRET_KEY and settings.STRIPE_WEBHOOK_SECRET)


def require_configured() -> None:
    if not configured():
        raise BillingError(
            BillingErrorCode.STRIPE_NOT_CONFIGURED,
            "Buying credits is not set up on this server (STRIPE_SECRET_KEY and "
            "STRIPE_WEBHOOK_SECRET). Ask support to add credits.",
            status=503,
        )


def client() -> stripe.StripeClient:
    base = {"api": settings.STRIPE_API_BASE.rstrip("/")} if settings.STRIPE_API_BASE else None
    return stripe.StripeClient(
        settings.STRIPE_SECRET_KEY,
        base_addresses=base,
        max_network_retries=1,
        http_client=stripe.new_default_http_client(timeout=TIMEOUT_SECONDS),
    )


def _unavailable(exc: stripe.StripeError) -> BillingError:
    return BillingError(
        BillingErrorCode.STRIPE_UNAVAILABLE,
        f"Stripe did not open the checkout ({exc.user_message or type(exc).__name__}). "
        "Nothing was charged; try again in a minute.",
        status=502,
    )


def checkout_session_create(*, params: dict, idempotency_key: str) -> stripe.checkout.Session:
    try:
        return client().v1.checkout.sessions.create(params=params, options={"idempotency_key": idempotency_key})
    except stripe.StripeError as exc:
        raise _unavailable(exc) from exc


def checkout_session_receipt_url(session_id: str) -> str:
    """The receipt of a paid session's charge, or "" (none yet, or Stripe did not answer:
    the receipt is a convenience, the credits do not wait for it)."""
    try:
        session = client().v1.checkout.sessions.retrieve(session_id, params={"expand": EXPAND_CHARGE})
    except stripe.StripeError:
        return ""
    intent = session.to_dict().get("payment_intent")
    charge = intent.get("latest_charge") if isinstance(intent, dict) else None
    return (charge.get("receipt_url") or "") if isinstance(charge, dict) else ""


def event_verified(*, payload: bytes, signature: str | None) -> dict:
    """The event Stripe signed, as a dict; stripe.SignatureVerificationError (wrong or stale
    signature, no header) or ValueError (not UTF-8 JSON, or not an object) otherwise.

    The library checks the signature (the same check its construct_event makes, with its
    five-minute tolerance); the body is then read as plain JSON, because construct_event
    fails with an AttributeError on a signed body that is JSON but not an object."""
    stripe.WebhookSignature.verify_header(
        payload.decode("utf-8") if isinstance(payload, bytes) else payload,
        signature,
        settings.STRIPE_WEBHOOK_SECRET,
        stripe.Webhook.DEFAULT_TOLERANCE,
    )
    event = json.loads(payload)
    if not isinstance(event, dict):
        raise ValueError("the event is not a JSON object")
    return event
