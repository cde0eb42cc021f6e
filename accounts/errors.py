"""The accounts domain's one error type: a stable code and a message a person can act on."""


class AccountError(Exception):
    status = 400

    def __init__(self, message: str, *, code: str = "bad_request", status: int | None = None, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field
        if status is not None:
            self.status = status
