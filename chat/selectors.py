"""Reads of conversations. Every selector takes the account explicitly."""
from __future__ import annotations

from django.db.models import Count, QuerySet

from chat.errors import ConversationNotFound
from chat.models import Conversation, Message
from core.errors import object_id
from documents.selectors import document_ids_readable


def conversation_list(*, account, user=None, api_key=None) -> QuerySet[Conversation]:
    """A person's own conversations, or an API key's, newest activity first. Conversations
    are private to whoever started them, inside the account too, and a key is not the
    person who made it: a conversation a key started (api_key set) is that key's alone,
    also a row stored before this rule with the key's creator as `user`. A caller that
    presents a key is the key, whatever user comes with it."""
    conversations = Conversation.objects.for_account(account)
    if api_key is not None:
        conversations = conversations.filter(api_key=api_key)
    elif getattr(user, "pk", None):
        conversations = conversations.filter(user=user, api_key__isnull=True)
    else:
        return conversations.none()
    return conversations.annotate(message_count=Count("messages")).order_by("-updated_at", "-pk")


def conversation_access_by_id(*, account, conversation_id, user=None, api_key=None) -> Conversation:
    """The principal's own conversation (conversation_list's rule: a person's, or a key's), or
    ConversationNotFound (404) alike for a missing id, another account's, another person's
    or key's in this account, and a malformed one."""
    conversation = (conversation_list(account=account, user=user, api_key=api_key)
                    .filter(pk=object_id(conversation_id)).first())
    if conversation is None:
        raise ConversationNotFound()
    return conversation


def message_list(*, account, conversation: Conversation) -> QuerySet[Message]:
    return Message.objects.for_account(account).filter(conversation=conversation).order_by("created_at", "pk")


def messages_sources_readable(*, account, messages) -> list[Message]:
    """`messages` (a list) with their stored sources and citations checked against what the
    principal may read now: one that names a document since hidden from it (a restricted
    collection, access revoked) keeps its number but loses its name and link
    (`document_name` "", `available` false). One query for all of them."""
    messages = list(messages)
    cited = {s.get("document_id") for m in messages for s in (m.sources or []) + (m.citations or [])}
    readable = document_ids_readable(account=account, document_ids=cited)
    for message in messages:
        message.sources = [_redacted(s, readable) for s in message.sources or []]
        message.citations = [_redacted(s, readable) for s in message.citations or []]
    return messages


def _redacted(source: dict, readable: set[int]) -> dict:
    if source.get("document_id") in readable:
        return source
    return {**source, "document_name": "", "available": False}
