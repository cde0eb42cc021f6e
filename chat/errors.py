"""The chat domain's error: a GroundworkError whose codes are the websocket's `chat.error` codes."""

from chat.error_codes import ChatErrorCode
from core.errors import GroundworkError, NotFound


class ChatError(GroundworkError):
    """A chat turn was refused (bad request, unknown conversation, rate limited, …)."""


class ConversationNotFound(NotFound, ChatError):
    """Missing, another account's, another person's (or key's) in this account, or a malformed
    id: one answer for all (core.errors.NotFound)."""

    default_message = "That conversation does not exist. Start a new one."


class MessageNotFound(NotFound, ChatError):
    """An answer that is missing, another account's, in a conversation that is not the
    principal's, or a question rather than an answer: one answer for all."""

    default_message = "That answer does not exist."


class FeedbackError(ChatError):
    """Feedback that cannot be stored as given (a rating that is not up or down, a comment
    too long or with control characters): 400 with the field at fault."""


class ConversationError(ChatError):
    """A conversation change or search that cannot be made as given (a title that is empty,
    too long or has control characters; a search text likewise; nothing to regenerate):
    400 with the field at fault."""


class PromptTooLong(ChatError):
    """A turn whose prompt (the caller's system messages, the history and the question) cannot
    fit the chat model's context window with a short answer: 400 `prompt_too_long`, refused
    before anything is held or charged."""

    def __init__(self, *, prompt_tokens: int, window: int):
        super().__init__(
            ChatErrorCode.PROMPT_TOO_LONG,
            f"This turn's prompt is about {prompt_tokens:,} tokens and the chat model reads at most "
            f"{window:,} a turn, its answer included. Shorten the system message(s), the earlier "
            "messages or the question.",
            status=400,
            field="messages",
        )
        self.prompt_tokens, self.window = prompt_tokens, window
