"""The billing domain's error codes, each named once (CONVENTIONS: Saleor's error_codes.py).

A GroundworkError's `code` is one of these: a StrEnum, so it is the string itself in JSON,
in comparisons and in the websocket's `chat.error` frames. No imports: the parser sandbox
and every floor above may import it."""
from enum import StrEnum


class BillingErrorCode(StrEnum):
    BUDGET_EXCEEDED = "budget_exceeded"
    CONTACT_REQUIRED = "contact_required"
    HOLD_CLOSED = "hold_closed"
    HOLD_MISSING = "hold_missing"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    INSUFFICIENT_CREDITS = "insufficient_credits"
    INVALID_KEY = "invalid_key"
    INVALID_KIND = "invalid_kind"
    INVALID_PERIOD = "invalid_period"
    INVALID_TARGET = "invalid_target"
    INVALID_THRESHOLD = "invalid_threshold"
    REASON_REQUIRED = "reason_required"
