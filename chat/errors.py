"""The chat domain's error: a GroundworkError whose codes are the websocket's `chat.error` codes."""
from core.errors import GroundworkError, NotFound


class ChatError(GroundworkError):
    """A chat turn was refused (bad request, unknown conversation, rate limited, …)."""


class ConversationNotFound(NotFound, ChatError):
    """Missing, another account's, another person's (or key's) in this account, or a malformed
    id: one answer for all (core.errors.NotFound)."""

    default_message = "That conversation does not exist. Start a new one."
