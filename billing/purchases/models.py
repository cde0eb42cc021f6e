"""A purchase of credits through Stripe Checkout: one row per Checkout Session."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from billing.money import Money
from core.tenancy import TenantModel


class PurchaseStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    PAID = "paid", "Paid"
    FAILED = "failed", "Payment failed"
    EXPIRED = "expired", "Expired"
    PARTIALLY_REFUNDED = "partially_refunded", "Partly refunded"
    REFUNDED = "refunded", "Refunded"


class Purchase(TenantModel):
    """Credits an owner is buying or bought. The webhook finds a purchase by its Checkout
    Session's id, which only Stripe and this row know; `event_ids` are the Stripe events
    already applied to it (each changes it, and the ledger, once)."""

    public_id = models.UUIDField(
        default=uuid.uuid4, unique=True, editable=False, help_text="Sent to Stripe as client_reference_id and metadata"
    )
    stripe_session_id = models.CharField(max_length=255, unique=True)
    payment_intent_id = models.CharField(max_length=255, blank=True, db_index=True)
    credits = models.BigIntegerField()
    # Amounts count the currency's smallest unit, as Stripe does (cents, yen, fils: not always
    # cents); read them as Money (`amount`, `refunded`), never divided by 100.
    amount_cents = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=20, choices=PurchaseStatus.choices, default=PurchaseStatus.PENDING)
    receipt_url = models.URLField(max_length=1000, blank=True)
    credits_granted = models.BigIntegerField(default=0)
    refunded_cents = models.BigIntegerField(default=0, help_text="What Stripe says was refunded so far")
    credits_taken_back = models.BigIntegerField(default=0)
    event_ids = ArrayField(models.CharField(max_length=255), default=list, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    paid_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(condition=models.Q(credits__gt=0), name="purchase_credits_positive"),
            models.CheckConstraint(condition=models.Q(amount_cents__gt=0), name="purchase_amount_positive"),
        ]

    def __str__(self):
        return f"purchase of {self.credits:,} credits ({self.status})"

    @property
    def amount(self) -> Money:
        """What the buyer paid (or is paying)."""
        return Money.of_minor(self.amount_cents, self.currency)

    @property
    def refunded(self) -> Money:
        return Money.of_minor(self.refunded_cents, self.currency)
