"""The exports domain's error codes, each named once (CONVENTIONS: Saleor's error_codes.py).

A GroundworkError's `code` is one of these: a StrEnum, so it is the string itself in JSON,
in comparisons and in the websocket's `chat.error` frames. No imports: the parser sandbox
and every floor above may import it."""
from enum import StrEnum


class ExportErrorCode(StrEnum):
    EXPORT_EXPIRED = "export_expired"
    EXPORT_FAILED = "export_failed"
    EXPORT_NOT_READY = "export_not_ready"
