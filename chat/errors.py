"""The chat domain's error: a GroundworkError whose codes are the websocket's `chat.error` codes."""
from core.errors import GroundworkError


class ChatError(GroundworkError):
    """A chat turn was refused (bad request, unknown conversation, rate limited, …)."""
