"""Writes of chat rows other than a turn's own (the turn writes through chat.agent)."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record
from chat.error_codes import ChatErrorCode
from chat.errors import ConversationError, FeedbackError
from chat.models import FEEDBACK_COMMENT_MAX_LENGTH, Conversation, Message, MessageFeedback, Rating
from chat.selectors import answer_access_by_id, conversation_access_by_id
from core import sockets
from core.text import has_control_characters, has_control_characters_in_prose

TITLE_MAX_LENGTH = Conversation._meta.get_field("title").max_length
# A conversation's default title: its first real question, cut at a word at about this length.
DEFAULT_TITLE_LENGTH = 60


def conversation_default_title(question: str) -> str:
    """The question on one line (control characters and runs of spaces made one space), cut
    at the last whole word within DEFAULT_TITLE_LENGTH characters and marked "…"; a first
    word longer than that is cut inside it."""
    text = " ".join("".join(" " if has_control_characters(c) else c for c in question).split())
    if len(text) <= DEFAULT_TITLE_LENGTH:
        return text
    cut = text[: DEFAULT_TITLE_LENGTH + 1].rsplit(" ", 1)[0] if " " in text[: DEFAULT_TITLE_LENGTH + 1] else ""
    return (cut or text[:DEFAULT_TITLE_LENGTH]).rstrip(" ,;:-–—") + "…"


def _valid_rating(rating) -> str:
    if not isinstance(rating, str) or rating not in Rating.values:
        raise FeedbackError(ChatErrorCode.INVALID_RATING, 'The rating must be "up" or "down".', field="rating")
    return rating


def _valid_comment(comment) -> str:
    if comment is None:
        return ""
    if not isinstance(comment, str):
        raise FeedbackError(ChatErrorCode.INVALID_COMMENT, "The comment must be text.", field="comment")
    text = comment.replace("\r\n", "\n").strip()
    if len(text) > FEEDBACK_COMMENT_MAX_LENGTH:
        raise FeedbackError(
            ChatErrorCode.INVALID_COMMENT,
            f"The comment is {len(text):,} characters long; "
            f"at most {FEEDBACK_COMMENT_MAX_LENGTH:,} are kept. Say what was wrong in fewer words.",
            field="comment",
        )
    if has_control_characters_in_prose(text):
        raise FeedbackError(
            ChatErrorCode.INVALID_COMMENT,
            "The comment cannot contain control characters (line breaks and tabs are fine).",
            field="comment",
        )
    return text


def feedback_give(*, account, message_id, user=None, api_key=None, rating, comment=None) -> MessageFeedback:
    """The principal's feedback on one answer it may see (its own conversation's assistant
    message; else MessageNotFound, 404), stored once per person (or key) and message: giving
    it again replaces rating and comment and dates it anew. Input is checked before the
    message is looked up, so a bad rating is a 400 whatever the id."""
    rating, comment = _valid_rating(rating), _valid_comment(comment)
    message = answer_access_by_id(account=account, message_id=message_id, user=user, api_key=api_key)
    who = {"api_key": api_key} if api_key is not None else {"user": user, "api_key": None}
    values = {"rating": rating, "comment": comment, "created_at": timezone.now()}
    try:
        with transaction.atomic():
            feedback, _ = MessageFeedback.objects.for_account(account).update_or_create(
                message=message, **who, defaults=values, create_defaults={**values, "account": account}
            )
    except IntegrityError:
        # NOTE: two first clicks at once both found no row; the unique constraint let one
        # insert, so the other now updates the row that won.
        with transaction.atomic():
            feedback, _ = MessageFeedback.objects.for_account(account).update_or_create(
                message=message, **who, defaults=values, create_defaults={**values, "account": account}
            )
    return feedback


def _valid_title(title) -> str:
    if not isinstance(title, str):
        raise ConversationError(ChatErrorCode.INVALID_TITLE, "The title must be text.", field="title")
    text = title.strip()
    if not text:
        raise ConversationError(ChatErrorCode.INVALID_TITLE, "Type a title: it cannot be empty.", field="title")
    if len(text) > TITLE_MAX_LENGTH:
        raise ConversationError(
            ChatErrorCode.INVALID_TITLE,
            f"The title is {len(text):,} characters long; at most {TITLE_MAX_LENGTH} are kept. Shorten it.",
            field="title",
        )
    if has_control_characters(text):
        raise ConversationError(
            ChatErrorCode.INVALID_TITLE,
            "The title cannot contain line breaks, tabs or other control characters; type it on one line.",
            field="title",
        )
    return text


def conversation_rename(*, account, conversation_id, title, user=None, api_key=None) -> Conversation:
    """The principal's own conversation (else ConversationNotFound, 404) with `title`, stripped
    (1-200 characters on one line, else ConversationError, 400, and nothing changed). The
    title is checked before the conversation is looked up, so a bad title is a 400 whatever
    the id. Renaming does not move it up the list (its activity is its messages)."""
    title = _valid_title(title)
    conversation = conversation_access_by_id(
        account=account, conversation_id=conversation_id, user=user, api_key=api_key
    )
    Conversation.objects.for_account(account).filter(pk=conversation.pk).update(title=title)
    conversation.title = title
    return conversation


@transaction.atomic
def conversation_delete(*, account, conversation_id, user=None, api_key=None) -> None:
    """Delete the principal's own conversation (else ConversationNotFound, 404) with its
    messages and the feedback on them, audited (`conversation.delete`: its id and how many
    messages, not its title: the audit log is read by admins and the conversation was
    private). The credit ledger is untouched: it is billing's, append-only, and refers to
    messages by strings. The principal's open sockets are told once it commits
    (`conversation.deleted`), so an open page closes it and a turn under way stops.

    NOTE: the row is locked first, as chat.agent.turn_finish locks it before storing an
    answer: a turn that finishes while this runs either stores its answer before and it is
    deleted with the rest, or finds the conversation gone and stores nothing (it still
    settles its credits)."""
    conversation = conversation_access_by_id(
        account=account, conversation_id=conversation_id, user=user, api_key=api_key
    )
    Conversation.objects.for_account(account).select_for_update().filter(pk=conversation.pk).first()
    messages = Message.objects.for_account(account).filter(conversation=conversation)
    count = messages.count()
    MessageFeedback.objects.for_account(account).filter(message__conversation=conversation).delete()
    # Earlier versions point at the answers that replaced them: clear those first, then delete
    # in one statement each rather than one per row.
    messages.filter(replaced_by__isnull=False).update(replaced_by=None)
    messages.delete()
    Conversation.objects.for_account(account).filter(pk=conversation.pk).delete()
    audit_record(
        account=account,
        action="conversation.delete",
        target=f"conversation:{conversation.pk}",
        detail={"messages": count},
        actor=api_key or user,
    )
    group = sockets.key_group(api_key.pk) if api_key is not None else sockets.member_group(account.pk, user.pk)
    sockets.conversation_deleted_on_commit(group, conversation.pk)
