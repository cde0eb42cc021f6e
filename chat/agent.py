"""The agent: route → hold credits → retrieve → prompt → stream → settle → persist.

`turn_prepare`, `ChatTurn.stream()` and `turn_finish` are the three steps of a turn;
`chat.driver.TurnRun` runs them in order for every surface (websocket, REST, SSE, the
OpenAI-compatible endpoint). No database transaction spans the model call: each step
opens its own account context.
"""
from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from core.tenancy import account_context
from billing import references
from billing.models import Kind
from billing.selectors import balance_get
from billing.services import credits_hold, hold_release, hold_settle
from chat.errors import ChatError
from chat.models import Conversation, Message, MessageStatus, Role
from chat.prompt import build_messages
from chat.ratelimit import check_chat_rate
from chat.selectors import conversation_get
from chat.router import GENERAL, LOOKUP, SUMMARY, match_document, route
from documents.models import Document, Status
from documents.search import expand_passages, first_chunks, search_for_query
from llm import client as llm
from llm.tokens import count_tokens

MAX_QUESTION_CHARS = 4000
PASSAGE_TOKENS_BOUND = 320  # a chunk of ~800 characters, with room to spare
SUMMARY_CHUNKS = 15  # how much of a document "summarize <document>" reads from its start
CITATION = re.compile(r"\[Document\s+(\d+)\]", re.I)


@dataclass(frozen=True)
class TurnOptions:
    """What an API caller may set for one turn, always within the server's bounds."""
    max_tokens: int | None = None  # at most CHAT_MAX_TOKENS
    temperature: float | None = None  # clamped to 0..CHAT_TEMPERATURE_MAX
    system: str = ""  # the caller's instructions, merged below the grounding rules
    end_user: str = ""  # the caller's end-user id (OpenAI `user`), stored on the question

    def bounded_max_tokens(self) -> int:
        if self.max_tokens is None:
            return settings.CHAT_MAX_TOKENS
        return max(1, min(int(self.max_tokens), settings.CHAT_MAX_TOKENS))

    def bounded_temperature(self, default: float) -> float:
        if self.temperature is None:
            return default
        return max(0.0, min(float(self.temperature), settings.CHAT_TEMPERATURE_MAX))


@dataclass
class ChatTurn:
    account_id: int
    conversation: Conversation
    user_message: Message
    route: str
    passages: list
    sources: list[dict]
    messages: list[dict]
    temperature: float
    hold: object
    request_id: str
    max_tokens: int = 512
    started: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    answer_parts: list[str] = field(default_factory=list)
    llm_stream: object = None

    @property
    def answer(self) -> str:
        return "".join(self.answer_parts)

    def stream(self):
        """Yield the answer's text as the model produces it (fallback model included).
        A turn cancelled before this point never calls the model."""
        if self.cancelled.is_set():
            return
        self.llm_stream = llm.chat(self.messages, temperature=self.temperature,
                                   max_tokens=self.max_tokens, cancelled=self.cancelled)
        for text in self.llm_stream:
            if self.first_token_at is None:
                self.first_token_at = time.monotonic()
            self.answer_parts.append(text)
            yield text


def _question(text) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ChatError("bad_request", "Type a question first.")
    if len(text) > MAX_QUESTION_CHARS:
        raise ChatError("bad_request", f"Questions are limited to {MAX_QUESTION_CHARS:,} characters; "
                                       "shorten it or split it in two.")
    return text.strip()


def _conversation(account, *, conversation_id, user, api_key, question: str) -> Conversation:
    if conversation_id in (None, ""):
        return Conversation.objects.for_account(account).create(
            account=account, user=user if getattr(user, "pk", None) else None, api_key=api_key, title=question[:80])
    # Another person's conversation, in this account too, answers like a missing one.
    found = conversation_get(account=account, conversation_id=conversation_id, user=user, api_key=api_key)
    if found is None:
        raise ChatError("not_found", "That conversation does not exist. Start a new one.", status=404)
    return found


def _history(conversation: Conversation) -> list[tuple[str, str]]:
    rows = (Message.objects.for_account(conversation.account_id).filter(conversation=conversation)
            .exclude(status=MessageStatus.FAILED).order_by("created_at", "pk").values_list("role", "content"))
    return list(rows)


def _worst_case(question: str, history: list[tuple[str, str]], kind: str, options: TurnOptions) -> int:
    passages = {GENERAL: 0, LOOKUP: settings.RAG_TOP_K * 3, SUMMARY: SUMMARY_CHUNKS}[kind]
    prompt = (400 + count_tokens(question) + count_tokens(options.system)
              + min(sum(count_tokens(t) for _, t in history), settings.CHAT_HISTORY_TOKENS))
    return prompt + passages * PASSAGE_TOKENS_BOUND + options.bounded_max_tokens()


def _retrieve(account, kind: str, target: str, question: str, key: str):
    if kind == SUMMARY:
        documents = list(Document.objects.for_account(account).filter(status=Status.READY))
        document = match_document(target, documents)
        if document is not None:
            return SUMMARY, first_chunks(account=account, document=document, limit=SUMMARY_CHUNKS)
        kind = LOOKUP  # no such document: look the words up instead
    if kind == LOOKUP:
        hits = search_for_query(account=account, query=question, key=key)
        return LOOKUP, expand_passages(account=account, hits=hits)
    return GENERAL, []


def _sources(passages) -> list[dict]:
    return [{"n": n, "document_id": p.document_id, "document_name": p.document_name, "chunk_index": p.chunk_start,
             "pages": list(p.pages) if p.pages else None, "score": round(float(p.score), 4)}
            for n, p in enumerate(passages, start=1)]


def turn_prepare(*, account, user=None, api_key=None, question, conversation_id=None,
                 history: list[tuple[str, str]] | None = None, request_id: str | None = None,
                 cancelled: threading.Event | None = None, options: TurnOptions | None = None) -> ChatTurn:
    """Everything before the model call. Raises ChatError / InsufficientCredits /
    ProviderError with nothing held, charged or left half-written.

    `history` (role, text) replaces the stored conversation's (the OpenAI-compatible
    endpoint, whose clients send the whole conversation each time)."""
    question = _question(question)
    options = options or TurnOptions()
    check_chat_rate(account_id=account.pk, user_id=getattr(user, "pk", None),
                    api_key_id=getattr(api_key, "pk", None))
    request_id = request_id or uuid.uuid4().hex
    with account_context(account, user=user):
        conversation = _conversation(account, conversation_id=conversation_id, user=user, api_key=api_key,
                                     question=question)
        history = _history(conversation) if history is None else history
        names = list(Document.objects.for_account(account).filter(status=Status.READY).values_list("name", flat=True))
        decision = route(question, document_names=names)
        hold = credits_hold(account=account, amount=_worst_case(question, history, decision.kind, options),
                            key=f"chat:{request_id}", reference=references.conversation(conversation.pk))
    try:
        with account_context(account, user=user):
            kind, passages = _retrieve(account, decision.kind, decision.summary_target, question,
                                       key=f"chat:{request_id}:query")
            messages = build_messages(question=question, passages=passages, history=history,
                                      grounded=bool(passages) or kind != GENERAL,
                                      history_budget=settings.CHAT_HISTORY_TOKENS, instructions=options.system)
            sources = _sources(passages)
            user_message = Message.objects.for_account(account).create(
                account=account, conversation=conversation, role=Role.USER, content=question, route=kind,
                sources=sources, end_user=options.end_user[:256])
    except Exception:
        with account_context(account):
            hold_release(hold=hold)
        raise
    return ChatTurn(account_id=account.pk, conversation=conversation, user_message=user_message, route=kind,
                    passages=passages, sources=sources, messages=messages,
                    temperature=options.bounded_temperature(0.7 if kind == GENERAL and not passages else 0.2),
                    hold=hold, request_id=request_id, max_tokens=options.bounded_max_tokens(),
                    cancelled=cancelled or threading.Event())


def _citations(answer: str, sources: list[dict]) -> list[dict]:
    """The sources the answer cites as [Document N]; if it cites none, every source used."""
    by_n = {s["n"]: s for s in sources}
    cited = []
    for match in CITATION.finditer(answer):
        n = int(match.group(1))
        if n in by_n and by_n[n] not in cited:
            cited.append(by_n[n])
    chosen = cited or sources
    return [{k: s[k] for k in ("n", "document_id", "document_name", "chunk_index", "pages")} for s in chosen]


def turn_finish(turn: ChatTurn, *, failed: Exception | None = None) -> dict:
    """Settle the hold to the provider-reported usage and persist the answer.

    Returns what `chat.done` carries. On a failed generation with nothing used, the hold
    is released and no answer is stored.
    """
    usage = turn.llm_stream.final_usage(turn.answer, len(turn.answer_parts)) if turn.llm_stream else llm.ChatUsage()
    used = usage.total_tokens if (turn.answer_parts or usage.reported) else 0
    account_id = turn.account_id
    with account_context(account_id=account_id):
        if failed is not None and not used:
            hold_release(hold=turn.hold)
            return {}
        status = (MessageStatus.FAILED if failed is not None else
                  MessageStatus.CANCELLED if turn.cancelled.is_set() else MessageStatus.COMPLETE)
        answer = Message.objects.for_account(account_id).create(
            account_id=account_id, conversation=turn.conversation, role=Role.ASSISTANT, content=turn.answer,
            status=status, route=turn.route, sources=turn.sources, citations=_citations(turn.answer, turn.sources),
            prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens, model=turn.llm_stream.model if turn.llm_stream else "",
            provider=turn.llm_stream.provider if turn.llm_stream else "",
            latency_ms=int((time.monotonic() - turn.started) * 1000),
            first_token_ms=int((turn.first_token_at - turn.started) * 1000) if turn.first_token_at else None,
            error_code=getattr(failed, "code", "") if failed else "")
        entry = hold_settle(hold=turn.hold, used_tokens=used, kind=Kind.CHAT, model=answer.model,
                            provider=answer.provider, reference=references.message(answer.pk),
                            metadata={"estimated": not usage.reported} if not usage.reported else None)
        answer.credits_charged = -entry.delta if entry else 0
        answer.save(update_fields=["credits_charged"])
        Conversation.objects.for_account(account_id).filter(pk=turn.conversation.pk).update(updated_at=timezone.now())
        remaining = balance_get(account=account_id)
    finish_reason = (turn.llm_stream.finish_reason if turn.llm_stream else "") or "stop"
    return {"message_id": answer.pk, "conversation_id": turn.conversation.pk, "answer": answer.content,
            "citations": answer.citations, "status": answer.status, "finish_reason": finish_reason,
            "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                      "total_tokens": usage.total_tokens},
            "credits_remaining": remaining}
