"""The chat page: conversations in a sidebar, one conversation's history rendered on the
server, and the live websocket (/ws/chat/) driven by static/js/chat.js. Thin: read through
the selectors, render."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.shortcuts import render

from accounts.permissions import Action, page_check
from chat import selectors
from chat.errors import ConversationError
from chat.models import Rating
from core.pages import account_page, page_found
from documents.models import Status
from documents.selectors import document_list

CONVERSATIONS_SHOWN = 50
FEEDBACK_PER_PAGE = 25


def _searched_for(question, answer) -> str:
    """What was searched for this turn, when it is not simply what the person typed (a
    follow-up rewritten with its conversation). Older messages, and builds whose messages
    do not keep the query, have none: then nothing is shown."""
    for message in (answer, question):
        query = (getattr(message, "query", "") or "").strip() if message is not None else ""
        if query:
            typed = " ".join((question.content if question is not None else "").split()).casefold()
            return query if " ".join(query.split()).casefold() != typed else ""
    return ""


def _with_turn_sources(messages: list) -> list:
    """Each answer gets what the page shows under it: `cited` (its citations), `also_retrieved`
    (retrieved sources it did not cite) and `searched_for`, the same as chat.js builds live."""
    question = None
    for message in messages:
        if message.role != "assistant":
            question = message
            continue
        cited = message.citations or []
        cited_numbers = {c.get("n") for c in cited}
        message.cited = cited
        message.also_retrieved = [s for s in message.sources or [] if s.get("n") not in cited_numbers]
        message.searched_for = _searched_for(question, message)
    return messages


def _with_my_feedback(account, messages: list, user) -> None:
    """Each answer gets `my_feedback`: the person's own thumbs up/down on it, or None."""
    answers = [m for m in messages if m.role == "assistant"]
    mine = selectors.feedback_of_principal(account=account, messages=answers, user=user)
    for message in answers:
        message.my_feedback = mine.get(message.pk)


def _sources_of(messages) -> list[dict]:
    """The sources panel shows what the latest answer was built from."""
    for message in reversed(messages):
        if message.role == "assistant" and message.sources:
            return message.sources
    return []


def _last_answer_id(messages: list) -> int | None:
    """The answer "Regenerate" is offered on: the current answer to the last question."""
    for message in reversed(messages):
        if message.role == "user":
            return None
        if message.replaced_by_id is None:
            return message.pk
    return None


def _unanswered(messages: list) -> bool:
    """The conversation ends with a question and no answer: its turn failed (the model server
    busy or unreachable) or is still being answered. The page offers to ask it again."""
    return bool(messages) and messages[-1].role == "user"


@account_page(page_check(Action.CHAT))
def chat_view(request, conversation_id: int | None = None):
    account = request.account
    conversation, messages = None, []
    if conversation_id is not None:
        conversation = page_found(
            selectors.conversation_access_by_id, account=account, conversation_id=conversation_id, user=request.user
        )
        messages = _with_turn_sources(
            selectors.messages_sources_readable(
                account=account, messages=selectors.message_list(account=account, conversation=conversation)
            )
        )
        _with_my_feedback(account, messages, request.user)
    search, search_error = request.GET.get("q", ""), ""
    try:
        q = selectors.conversation_search_text(search)
    except ConversationError as exc:
        q, search_error = None, exc.message
    return render(
        request,
        "chat/chat.html",
        {
            # The same selector as GET /api/v1/conversations/?q=
            "conversations": selectors.conversation_list(account=account, user=request.user, q=q)[:CONVERSATIONS_SHOWN],
            "search": search.strip()[: selectors.SEARCH_MAX_CHARS] if q or search_error else "",
            "search_error": search_error,
            "last_answer_id": _last_answer_id(messages),
            "unanswered": _unanswered(messages),
            "conversation": conversation,
            "chat_messages": messages,
            "sources": _sources_of(messages),
            # For the Markdown renderer: which [Document N] of which answer opens which chunk.
            # A source hidden since (a restricted collection) stays plain "[Document N]" text.
            "citations": {
                m.pk: [s for s in m.sources or m.citations if s.get("available", True)]
                for m in messages
                if m.role == "assistant"
            },
            "ready_documents": document_list(account=account, status=Status.READY).count(),
        },
    )


@account_page(page_check(Action.FEEDBACK_VIEW))
def feedback_view(request):
    """Owners and admins: what people said about answers, newest first, with the question,
    the answer and the sources it cited (those the reader may no longer open say so)."""
    account = request.account
    rating = request.GET.get("rating") if request.GET.get("rating") in Rating.values else None
    page = Paginator(selectors.feedback_list(account=account, rating=rating), FEEDBACK_PER_PAGE).get_page(
        request.GET.get("page")
    )
    answers = selectors.messages_sources_readable(account=account, messages=[f.message for f in page])
    return render(
        request,
        "chat/feedback.html",
        {
            "page": page,
            "rating": rating,
            # For the Markdown renderer, as on the chat page: which [Document N] opens which chunk.
            "citations": {m.pk: [s for s in m.sources or m.citations if s.get("available", True)] for m in answers},
        },
    )
