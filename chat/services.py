"""Writes of chat rows other than a turn's own (the turn writes through chat.agent)."""
from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from chat.error_codes import ChatErrorCode
from chat.errors import FeedbackError
from chat.models import FEEDBACK_COMMENT_MAX_LENGTH, MessageFeedback, Rating
from chat.selectors import answer_access_by_id
from core.text import has_control_characters_in_prose


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
        raise FeedbackError(ChatErrorCode.INVALID_COMMENT, f"The comment is {len(text):,} characters long; "
                            f"at most {FEEDBACK_COMMENT_MAX_LENGTH:,} are kept. Say what was wrong in fewer words.",
                            field="comment")
    if has_control_characters_in_prose(text):
        raise FeedbackError(ChatErrorCode.INVALID_COMMENT, "The comment cannot contain control characters "
                            "(line breaks and tabs are fine).", field="comment")
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
                message=message, **who, defaults=values, create_defaults={**values, "account": account})
    except IntegrityError:
        # NOTE: two first clicks at once both found no row; the unique constraint let one
        # insert, so the other now updates the row that won.
        with transaction.atomic():
            feedback, _ = MessageFeedback.objects.for_account(account).update_or_create(
                message=message, **who, defaults=values, create_defaults={**values, "account": account})
    return feedback
