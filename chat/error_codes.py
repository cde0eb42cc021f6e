"""The chat domain's error codes, each named once (CONVENTIONS: Saleor's error_codes.py).

A GroundworkError's `code` is one of these: a StrEnum, so it is the string itself in JSON,
in comparisons and in the websocket's `chat.error` frames. No imports: the parser sandbox
and every floor above may import it."""
from enum import StrEnum


class ChatErrorCode(StrEnum):
    MODEL_NOT_FOUND = "model_not_found"
    UNAUTHENTICATED = "unauthenticated"
