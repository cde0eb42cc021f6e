"""The billing domain's errors: GroundworkErrors with a stable code and a message a person
can act on."""

from billing.error_codes import BillingErrorCode
from core.errors import GroundworkError


class BillingError(GroundworkError):
    """A credit operation was refused (bad amount, key or kind, a closed hold)."""


class InsufficientCredits(BillingError):
    """402 in the API, `chat.error` with this code on the websocket, a failed document's reason."""

    def __init__(self, *, needed: int, balance: int):
        super().__init__(
            BillingErrorCode.INSUFFICIENT_CREDITS,
            f"This needs about {needed:,} credits; the account has {balance:,}. An owner can add credits.",
            status=402,
        )
        self.needed = needed
        self.balance = balance


class IdempotencyConflict(BillingError):
    """The same idempotency key was used again with a different amount."""


class BudgetExceeded(BillingError):
    """A member's or an API key's daily/monthly cap would be passed: 402 `budget_exceeded`
    in the API and /v1, `chat.error` with this code on the websocket, a failed document's
    reason. The message names the cap, what was spent and when it resets."""

    def __init__(
        self, *, whose: str, period_label: str, limit: int, spent: int, needed: int, resets: str, account_name: str
    ):
        when = "today" if period_label == "daily" else "this month"
        left = limit - spent
        state = (
            f"is used up ({spent:,} spent {when})"
            if left <= 0
            else f"has {left:,} left {when} and this needs about {needed:,}"
        )
        super().__init__(
            BillingErrorCode.BUDGET_EXCEEDED,
            f"{whose} {period_label} budget of {limit:,} credits {state}; it resets {resets}. "
            f"Ask an admin of {account_name} to raise it.",
            status=402,
        )
        self.limit = limit
        self.spent = spent
        self.needed = needed
