"""The billing domain's errors: GroundworkErrors with a stable code and a message a person
can act on."""
from core.errors import GroundworkError


class BillingError(GroundworkError):
    """A credit operation was refused (bad amount, key or kind, a closed hold)."""


class InsufficientCredits(BillingError):
    """402 in the API, `chat.error` with this code on the websocket, a failed document's reason."""

    def __init__(self, *, needed: int, balance: int):
        super().__init__(
            "insufficient_credits",
            f"This needs about {needed:,} credits; the account has {balance:,}. An owner can add credits.",
            status=402,
        )
        self.needed = needed
        self.balance = balance


class IdempotencyConflict(BillingError):
    """The same idempotency key was used again with a different amount."""
