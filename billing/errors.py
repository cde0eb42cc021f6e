"""The billing domain's errors: a stable code and a message a person can act on."""


class BillingError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


class InsufficientCredits(BillingError):
    """402 in the API, `chat.error` with this code on the websocket, a failed document's reason."""

    status = 402
    code = "insufficient_credits"

    def __init__(self, *, needed: int, balance: int):
        self.needed = needed
        self.balance = balance
        super().__init__(
            f"This needs about {needed:,} credits; the account has {balance:,}. An owner can add credits."
        )


class IdempotencyConflict(BillingError):
    code = "idempotency_conflict"
