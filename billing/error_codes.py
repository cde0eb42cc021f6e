"""billing's error codes, each named once (docs/architecture.md, "Where to add … an error")."""

from enum import StrEnum


class BillingErrorCode(StrEnum):
    BUDGET_EXCEEDED = "budget_exceeded"
    CONTACT_REQUIRED = "contact_required"
    HOLD_CLOSED = "hold_closed"
    HOLD_MISSING = "hold_missing"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    INSUFFICIENT_CREDITS = "insufficient_credits"
    INVALID_KEY = "invalid_key"
    INVALID_PERIOD = "invalid_period"
    INVALID_TARGET = "invalid_target"
    INVALID_THRESHOLD = "invalid_threshold"
    REASON_REQUIRED = "reason_required"
    STRIPE_NOT_CONFIGURED = "stripe_not_configured"
    STRIPE_UNAVAILABLE = "stripe_unavailable"
