"""Reads of conversations. Every selector takes the account explicitly."""

from __future__ import annotations

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery

from chat.error_codes import ChatErrorCode
from chat.errors import ConversationError, ConversationNotFound, MessageNotFound
from chat.models import Conversation, Message, MessageFeedback, Rating, Role
from core.errors import object_id
from core.tenancy import dangerously_bypass_tenancy
from core.text import has_control_characters
from documents.selectors import document_ids_readable

# What a conversation search may be: a few words, not a document.
SEARCH_MAX_CHARS = 200


def conversation_search_text(q) -> str | None:
    """The `?q=` of a conversation search, checked: None for no search (absent, or only
    spaces), else the text stripped, 1-200 characters on one line (ConversationError, 400)."""
    if q is None:
        return None
    if not isinstance(q, str):
        raise ConversationError(ChatErrorCode.INVALID_QUERY, "Search for text.", field="q")
    text = q.strip()
    if not text:
        return None
    if len(text) > SEARCH_MAX_CHARS:
        raise ConversationError(
            ChatErrorCode.INVALID_QUERY,
            f"The search is {len(text):,} characters long; at most "
            f"{SEARCH_MAX_CHARS} are searched. Search for a few words.",
            field="q",
        )
    if has_control_characters(text):
        raise ConversationError(
            ChatErrorCode.INVALID_QUERY,
            "The search cannot contain line breaks, tabs or other control characters.",
            field="q",
        )
    return text


def conversation_list(*, account, user=None, api_key=None, q: str | None = None) -> QuerySet[Conversation]:
    """A person's own conversations, or an API key's, newest activity first. Conversations
    are private to whoever started them, inside the account too, and a key is not the
    person who made it: a conversation a key started (api_key set) is that key's alone,
    also a row stored before this rule with the key's creator as `user`. A caller that
    presents a key is the key, whatever user comes with it.

    `q` (checked by conversation_search_text): only those whose title or any message's text
    contains it, case-insensitively (ILIKE, its wildcards escaped). No text index: the scan
    reads the principal's own messages only, by the conversation index, so it grows with one
    person's history, not the account's (5,000 of a person's messages among 50,000 of the
    account's: ~20 ms, chat/tests/test_conversation_search_scale.py)."""
    conversations = Conversation.objects.for_account(account)
    if api_key is not None:
        conversations = conversations.filter(api_key=api_key)
    elif getattr(user, "pk", None):
        conversations = conversations.filter(user=user, api_key__isnull=True)
    else:
        return conversations.none()
    if q:
        # Only the principal's own messages are read (its conversations' ids first, then their
        # messages by the conversation index), never the whole account's.
        said = (
            Message.objects.for_account(account)
            .filter(conversation__in=conversations.values("pk"), content__icontains=q)
            .values("conversation_id")
        )
        conversations = conversations.filter(Q(title__icontains=q) | Q(pk__in=said))
    return conversations.annotate(message_count=Count("messages")).order_by("-updated_at", "-pk")


def conversation_access_by_id(*, account, conversation_id, user=None, api_key=None) -> Conversation:
    """The principal's own conversation (conversation_list's rule: a person's, or a key's), or
    ConversationNotFound (404) alike for a missing id, another account's, another person's
    or key's in this account, and a malformed one."""
    conversation = (
        conversation_list(account=account, user=user, api_key=api_key).filter(pk=object_id(conversation_id)).first()
    )
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


def answer_access_by_id(*, account, message_id, user=None, api_key=None) -> Message:
    """An assistant message of one of the principal's own conversations (conversation_list's
    rule), or MessageNotFound (404) alike for a missing id, another account's, another
    person's or key's, a question (a user message) and a malformed id."""
    message = (
        Message.objects.for_account(account)
        .filter(
            pk=object_id(message_id),
            role=Role.ASSISTANT,
            conversation__in=conversation_list(account=account, user=user, api_key=api_key).values("pk"),
        )
        .first()
    )
    if message is None:
        raise MessageNotFound()
    return message


def _turn_text(messages, *, role: str, conversation: str, created: str):
    """A subquery: the text of the latest `role` message of the conversation named by the
    outer reference `conversation`, at or before the time `created`."""
    return (
        messages.filter(conversation=OuterRef(conversation), role=role, created_at__lte=OuterRef(created))
        .order_by("-created_at", "-pk")
        .values("content")[:1]
    )


def feedback_list(*, account, rating: str | None = None) -> QuerySet[MessageFeedback]:
    """Every feedback of the account, newest first, each with its answer (`message`) and the
    question it answered (`question`, annotated: one query for a page)."""
    feedback = (
        MessageFeedback.objects.for_account(account)
        .select_related("message", "user", "api_key")
        .annotate(
            question=Subquery(
                _turn_text(
                    Message.objects.for_account(account),
                    role=Role.USER,
                    conversation="message__conversation",
                    created="message__created_at",
                )
            )
        )
    )
    if rating is not None:
        feedback = feedback.filter(rating=rating)
    return feedback.order_by("-created_at", "-pk")


def feedback_of_principal(*, account, messages, user=None, api_key=None) -> dict[int, MessageFeedback]:
    """The principal's own feedback on `messages`, by message id (what the chat page shows as
    pressed when a conversation is reopened)."""
    who = {"api_key": api_key} if api_key is not None else {"user": user, "api_key__isnull": True}
    if api_key is None and not getattr(user, "pk", None):
        return {}
    rows = MessageFeedback.objects.for_account(account).filter(message__in=[m.pk for m in messages], **who)
    return {f.message_id: f for f in rows}


def feedback_regression_cases(*, account=None) -> list[dict]:
    """Down-voted answers as questions to replay (`python -m bench answer_eval --feedback`):
    each with the question, the conversation's previous turn (`previous_question`,
    `previous_answer`, "" when it was the first), the answer that was voted down, its
    citations and the comment, oldest first. `account=None`: every account's, for the bench
    (it runs as a system job; the read bypasses row-level security, and says why)."""
    if account is not None:
        return _regression_cases(MessageFeedback.objects.for_account(account), Message.objects.for_account(account))
    with dangerously_bypass_tenancy(reason="bench answer_eval --feedback: replaying down-voted answers"):
        return _regression_cases(MessageFeedback.all_accounts.all(), Message.all_accounts.all())


def _regression_cases(feedback, messages) -> list[dict]:
    question = _turn_text(messages, role=Role.USER, conversation="message__conversation", created="message__created_at")
    rows = (
        feedback.filter(rating=Rating.DOWN)
        .select_related("message")
        .annotate(
            question=Subquery(question),
            question_at=Subquery(
                messages.filter(
                    conversation=OuterRef("message__conversation"),
                    role=Role.USER,
                    created_at__lte=OuterRef("message__created_at"),
                )
                .order_by("-created_at", "-pk")
                .values("created_at")[:1]
            ),
        )
        .order_by("created_at", "pk")
    )
    cases = []
    for row in rows:
        # (The previous turn as follow-ups read it: without an answer's earlier versions.)
        earlier = (
            messages.filter(
                conversation_id=row.message.conversation_id, created_at__lt=row.question_at, replaced_by__isnull=True
            ).order_by("-created_at", "-pk")
            if row.question_at
            else messages.none()
        )
        previous = {m.role: m.content for m in reversed(earlier[:2])}
        cases.append(
            {
                "account_id": row.account_id,
                "conversation_id": row.message.conversation_id,
                "message_id": row.message_id,
                "question": row.question or "",
                "previous_question": previous.get(Role.USER, ""),
                "previous_answer": previous.get(Role.ASSISTANT, ""),
                "answer": row.message.content,
                "citations": row.message.citations or [],
                "comment": row.comment,
            }
        )
    return cases
