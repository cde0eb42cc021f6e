"""Reads of purchases. Every selector takes the account explicitly."""

from __future__ import annotations

from django.db.models import QuerySet

from billing.purchases.models import Purchase


def purchase_list(*, account) -> QuerySet[Purchase]:
    """The account's purchases, newest first."""
    return Purchase.objects.for_account(account).order_by("-created_at", "-pk")


def purchase_by_session(*, account, session_id: str) -> Purchase | None:
    """The account's purchase of this Checkout Session; None for another account's."""
    if not session_id:
        return None
    return Purchase.objects.for_account(account).filter(stripe_session_id=session_id).first()
