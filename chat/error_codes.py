"""chat's error codes, each named once (docs/architecture.md, "Where to add … an error")."""

from enum import StrEnum


class ChatErrorCode(StrEnum):
    MODEL_NOT_FOUND = "model_not_found"
    UNAUTHENTICATED = "unauthenticated"
    INVALID_RATING = "invalid_rating"
    INVALID_COMMENT = "invalid_comment"
    INVALID_TITLE = "invalid_title"
    INVALID_QUERY = "invalid_query"
    NOTHING_TO_REGENERATE = "nothing_to_regenerate"
    PROMPT_TOO_LONG = "prompt_too_long"
