"""The core domain's error codes, each named once (CONVENTIONS: Saleor's error_codes.py).

A GroundworkError's `code` is one of these: a StrEnum, so it is the string itself in JSON,
in comparisons and in the websocket's `chat.error` frames. No imports: the parser sandbox
and every floor above may import it."""
from enum import StrEnum


class CoreErrorCode(StrEnum):
    BAD_REQUEST = "bad_request"
    FORBIDDEN = "forbidden"
    INVALID_AMOUNT = "invalid_amount"
    INVALID_EMAIL = "invalid_email"
    INVALID_NAME = "invalid_name"
    NOT_FOUND = "not_found"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    TOO_LARGE = "too_large"
