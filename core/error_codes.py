"""core's error codes, each named once (docs/architecture.md, "Where to add … an error")."""

from enum import StrEnum


class CoreErrorCode(StrEnum):
    BAD_REQUEST = "bad_request"
    FORBIDDEN = "forbidden"
    INVALID_AMOUNT = "invalid_amount"
    INVALID_KIND = "invalid_kind"  # a kind (of spending, of grant, of source) that does not exist
    INVALID_EMAIL = "invalid_email"
    INVALID_NAME = "invalid_name"
    NOT_FOUND = "not_found"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    TOO_LARGE = "too_large"
    UNAVAILABLE = "unavailable"
