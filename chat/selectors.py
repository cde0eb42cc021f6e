"""Reads of conversations. Every selector takes the account explicitly."""
from __future__ import annotations

from django.db.models import Count, QuerySet

from chat.models import Conversation, Message


def conversation_list(*, account) -> QuerySet[Conversation]:
    return (Conversation.objects.for_account(account).annotate(message_count=Count("messages"))
            .order_by("-updated_at", "-pk"))


def conversation_get(*, account, conversation_id) -> Conversation | None:
    try:
        return conversation_list(account=account).filter(pk=int(conversation_id)).first()
    except (TypeError, ValueError):
        return None


def message_list(*, account, conversation: Conversation) -> QuerySet[Message]:
    return Message.objects.for_account(account).filter(conversation=conversation).order_by("created_at", "pk")
