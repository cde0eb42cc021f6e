"""The chat domain's error: a stable code (the websocket's `chat.error` codes) and a message."""


class ChatError(Exception):
    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def as_chat_error(exc: Exception) -> ChatError | None:
    """One mapping, used by the websocket, SSE and the OpenAI endpoint: any domain error with
    a code and message (InsufficientCredits, ProviderError, ChatError) becomes a ChatError."""
    if isinstance(exc, ChatError):
        return exc
    code, message = getattr(exc, "code", None), getattr(exc, "message", None)
    if code and message:
        return ChatError(code, message, getattr(exc, "status", 400))
    return None
