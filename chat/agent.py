"""The agent: route → hold credits → retrieve → prompt → stream → settle → persist.

`turn_prepare`, `ChatTurn.stream()` and `turn_finish` are the three steps of a turn;
`chat.driver.TurnRun` runs them in order for every surface (websocket, REST, SSE, the
OpenAI-compatible endpoint). No database transaction spans the model call: each step
opens its own account context.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from core import rows
from core.tenancy import account_context
from billing import pricing, references
from billing.models import Kind
from billing.selectors import balance_get, budget_status_for
from billing.services import HoldDraw, credits_hold, hold_release, hold_settle
from chat import answering
from chat.errors import ChatError
from chat.models import Conversation, Message, MessageStatus, Role
from chat.prompt import build_messages
from chat.ratelimit import check_chat_rate
from chat.selectors import conversation_access_by_id
from chat.router import GENERAL, LOOKUP, SUMMARY, is_followup, match_document, route, standalone_query
from documents.chunking import embedding_tokens
from documents.embedding import active_embedding_model
from documents.models import Document, Status
from documents.selectors import collection_ids_requested
from retrieval.search import expand_passages, first_chunks, hit_passages, hybrid_search, ocr_chunk_ids
from llm import client as llm
from llm.tokens import count_tokens

MAX_QUESTION_CHARS = 4000
PASSAGE_TOKENS_BOUND = 320  # a chunk of ~800 characters, with room to spare
SUMMARY_CHUNKS = 15  # how much of a document "summarize <document>" reads from its start
BUNDLED_MIN_RELEVANCE = 0.58  # bench/answer_eval.py: all-MiniLM-L6-v2, FAQ vs unanswerable questions
NOT_IN_DOCUMENTS = ("Your team's documents don't cover this, so this is a general answer, "
                    "not from your documents:\n\n")
NOTHING_TO_QUOTE = "The documents I found don't answer this directly; the passages I searched are listed below."


@dataclass(frozen=True)
class Profile:
    """How a turn uses the chat model (settings.CHAT_PROFILE; measured in bench/answer_eval.py)."""
    name: str
    passages: int | None  # how many passages the model reads (None: all, each with its neighbours)
    max_tokens: int | None  # the answer budget (None: CHAT_MAX_TOKENS)
    strict: bool  # every sentence checked against the passages and cited by overlap
    sampling: dict  # decoding settings sent with the request
    rewrite: bool  # follow-ups rewritten into standalone questions by the model
    max_sentences: int = 0  # a longer answer is stopped there (0: only the token budget)


PROFILES = {
    # SmolLM2-135M: three single chunks, a short budget, at most five sentences (it rambles to
    # any cap) and penalties against its loops.
    "small": Profile("small", passages=3, max_tokens=200, strict=True, rewrite=False, max_sentences=5,
                     sampling={"frequency_penalty": 0.3, "repeat_penalty": 1.15, "dry_multiplier": 0.8}),
    "capable": Profile("capable", passages=None, max_tokens=None, strict=False, rewrite=True, sampling={}),
}


def profile() -> Profile:
    name = settings.CHAT_PROFILE or ("small" if settings.LLM_BUNDLED and not settings.LOCAL_CHAT_MODEL_PATH
                                     else "capable")
    return PROFILES.get(name, PROFILES["capable"])


@dataclass(frozen=True)
class TurnOptions:
    """What an API caller may set for one turn, always within the server's bounds."""
    max_tokens: int | None = None  # at most CHAT_MAX_TOKENS
    temperature: float | None = None  # clamped to 0..CHAT_TEMPERATURE_MAX
    system: str = ""  # the caller's instructions, merged below the grounding rules
    end_user: str = ""  # the caller's end-user id (OpenAI `user`), stored on the question
    collection: object = None  # a collection id or a list of them to narrow retrieval to (None: all visible)

    def bounded_max_tokens(self, default: int | None = None) -> int:
        cap = settings.CHAT_MAX_TOKENS
        if self.max_tokens is None:
            return min(default or cap, cap)
        return max(1, min(int(self.max_tokens), cap))

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
    query: str = ""  # what was searched ("" when nothing was)
    reply: str = ""  # small talk: the whole answer, without a model
    note: str = ""  # said before the model's answer (a general answer's "not from your documents")
    profile: Profile = PROFILES["capable"]
    finish_reason: str = ""
    answered_by: str = ""  # "reply" (small talk), "model", or "passages" (the extractive answer)
    started: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    answer_parts: list[str] = field(default_factory=list)
    llm_stream: object = None
    spender: dict = field(default_factory=dict)  # {"user": …, "api_key": …}: whose budgets the turn spends
    # What the turn spent in its hold's name before the answer (the follow-up rewrite, the
    # query embedding): recorded when the hold is settled or released (billing.HoldDraw).
    draws: list = field(default_factory=list)


    @property
    def answer(self) -> str:
        return "".join(self.answer_parts)

    def _emit(self, text: str) -> str:
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        self.answer_parts.append(text)
        return text

    def stream(self):
        """Yield the answer's text as it is written. The model's answer passes a guard a
        sentence at a time (no loops; with a strict profile, nothing the passages do not
        say); when none of it passes, the passages' own best sentences answer instead.
        A turn cancelled before this point never calls the model."""
        if self.reply:
            self.finish_reason, self.answered_by = "stop", "reply"
            yield self._emit(self.reply)
            return
        if self.cancelled.is_set():
            return
        if self.note:
            yield self._emit(self.note)
        self.llm_stream = llm.chat(self.messages, temperature=self.temperature, max_tokens=self.max_tokens,
                                   cancelled=self.cancelled, sampling=self.profile.sampling or None)
        guard = answering.Guard(self.passages, strict=self.profile.strict and bool(self.passages),
                                loop_words=4 if self.profile.strict else 8, by_sentence=self.profile.strict,
                                max_sentences=self.profile.max_sentences, question=self.user_message.content)
        tokens = iter(self.llm_stream)
        try:
            for text in tokens:
                released = guard.feed(text)
                if released:
                    yield self._emit(released)
                if guard.stopped:
                    break
            else:
                tail = guard.flush()
                if tail:
                    yield self._emit(tail)
        finally:
            tokens.close()  # a guard's stop ends the provider's generation too
        self.finish_reason = "stop" if guard.stopped else (self.llm_stream.finish_reason or "stop")
        self.answered_by = "model"
        if not self.passages or self.cancelled.is_set():
            return
        # The question's own words pick the sentences: a follow-up was searched together
        # with the question before it, but asks something else (0.95 of the two-turn set
        # quoted the answer this way, 0.65 with the search query).
        question = self.user_message.content
        if not guard.answered:
            self.answered_by = "passages"
            yield self._emit(answering.extractive_answer(question, self.passages) or NOTHING_TO_QUOTE)
        elif guard.stopped in ("unsupported", "off_topic") and len(guard.released) == 1:
            # The model's first sentence held and its second did not: one sentence rarely
            # answers ("You can tell incomplete input from invalid input."), so the sentences of
            # the passage it cites say the rest, without what it already said.
            cited = answering.CITATION.search(self.answer)
            rest = answering.extractive_answer(question, self.passages, said=self.answer,
                                               within=int(cited.group(1)) if cited else None)
            if rest:
                self.answered_by = "model+passages"
                yield self._emit(("" if self.answer.endswith((" ", "\n")) else " ") + rest)


def _question(text) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ChatError("bad_request", "Type a question first.")
    if len(text) > MAX_QUESTION_CHARS:
        raise ChatError("bad_request", f"Questions are limited to {MAX_QUESTION_CHARS:,} characters; "
                                       "shorten it or split it in two.")
    return text.strip()


def _conversation(account, *, conversation_id, user, api_key, question: str) -> Conversation:
    if conversation_id in (None, ""):
        return rows.insert(Conversation, account_id=account.pk, user=user if getattr(user, "pk", None) else None,
                           api_key=api_key, title=question[:80])
    # Another person's conversation, in this account too, answers like a missing one.
    return conversation_access_by_id(account=account, conversation_id=conversation_id, user=user, api_key=api_key)


def _history(conversation: Conversation) -> list[tuple[str, str]]:
    rows = (Message.objects.for_account(conversation.account_id).filter(conversation=conversation)
            .exclude(status=MessageStatus.FAILED).order_by("created_at", "pk").values_list("role", "content"))
    return list(rows)


def _worst_case(question: str, history: list[tuple[str, str]], kind: str, options: TurnOptions,
                chosen: Profile) -> int:
    passages = {GENERAL: 0, LOOKUP: chosen.passages or settings.RAG_TOP_K * 3, SUMMARY: SUMMARY_CHUNKS}[kind]
    prompt = (400 + count_tokens(question) + count_tokens(options.system)
              + min(sum(count_tokens(t) for _, t in history), settings.CHAT_HISTORY_TOKENS))
    answer = prompt + passages * PASSAGE_TOKENS_BOUND + options.bounded_max_tokens(chosen.max_tokens)
    return (pricing.credits_at_most(kind=pricing.CHAT, tokens=answer)
            + _retrieval_worst_case(question, history, kind, chosen))


REWRITE_MAX_TOKENS = 64


def _retrieval_worst_case(question: str, history: list[tuple[str, str]], kind: str, chosen: Profile) -> int:
    """The most a turn spends before its answer: the follow-up rewrite (a chat call) and the
    query embedding. The turn's hold covers them too and they are drawn from it, so the
    balance and the principal's budgets refuse a turn before anything runs, never halfway.
    The embedding is counted like a document's estimate (embedding_tokens: exact for the
    bundled model, close for another provider; a little more is still drawn from the hold)."""
    if kind == GENERAL:
        return 0
    query = embedding_tokens(standalone_query(question, history))
    if not (history and is_followup(question) and chosen.rewrite):
        return pricing.credits_at_most(kind=pricing.EMBEDDING, tokens=query)
    # The model's rewrite (at most REWRITE_MAX_TOKENS, with [CLS] and [SEP]) or, when it
    # fails, the deterministic query.
    rewrite = (200 + count_tokens(question) + sum(count_tokens(t[:600]) for _, t in history[-4:])
               + REWRITE_MAX_TOKENS)
    return (pricing.credits_at_most(kind=pricing.CHAT, tokens=rewrite)
            + pricing.credits_at_most(kind=pricing.EMBEDDING, tokens=max(query, REWRITE_MAX_TOKENS + 2)))


def _retrieve(account, kind: str, target: str, query: str, embedded, chosen: Profile,
              collection_ids: list[int] | None = None):
    """(route, passages the model reads). A lookup whose best passage is not near enough to
    answer from (answering.relevance under RAG_MIN_RELEVANCE) comes back as GENERAL with none.
    `embedded` is `_embed(query)`, made before this transaction (None: not embedded yet, for
    a summary of a document that is not there, which looks the words up instead)."""
    if kind == SUMMARY:
        # Only documents the principal may read, in the collections asked for.
        documents = Document.objects.for_account(account).readable().filter(status=Status.READY)
        if collection_ids is not None:
            documents = documents.filter(collection_id__in=collection_ids)
        documents = list(documents)
        document = match_document(target, documents)
        if document is not None:
            return SUMMARY, first_chunks(account=account, document=document, limit=SUMMARY_CHUNKS)
        kind = LOOKUP  # no such document: look the words up instead
    if kind == LOOKUP:
        if embedded is None:
            raise _NeedsEmbedding()
        hits = hybrid_search(account=account, query=query, query_vector=embedded.vectors[0],
                             collection_ids=collection_ids, embedding_model=embedded.model)
        passages = expand_passages(account=account, hits=hits)
        if not passages or answering.relevance(query, hits, passages) < min_relevance():
            return GENERAL, []
        return LOOKUP, hit_passages(hits[:chosen.passages]) if chosen.passages else passages
    return GENERAL, []


class _NeedsEmbedding(Exception):
    """A summary of a document that is not there falls back to a lookup, which needs the
    query's embedding (made then, inside the retrieval transaction: a rare path)."""


def _embed(query: str, active, key: str):
    """The query's embedding and what it costs, drawn from the turn's hold (the hold covered
    it: never refused). Made outside any transaction: no row lock or snapshot is held across
    the provider call. Like every provider call it costs at least one credit."""
    embedding = llm.with_retries(lambda: llm.embed([query], model=active.model, dimensions=active.dimensions),
                                 tries=2, first_delay=0.2)
    draw = HoldDraw(key=key, kind=Kind.EMBEDDING, tokens=embedding.total_tokens,
                    model=embedding.model, provider=embedding.provider, reference=references.SEARCH)
    return embedding, draw


def min_relevance() -> float:
    """settings.RAG_MIN_RELEVANCE, or the bundled embedding model's calibrated value."""
    if settings.RAG_MIN_RELEVANCE is not None:
        return settings.RAG_MIN_RELEVANCE
    return BUNDLED_MIN_RELEVANCE if settings.LLM_BUNDLED else 0.0


def _rewrite_followup(question: str, history: list[tuple[str, str]], key: str, draws: list) -> str:
    """A follow-up made standalone by the chat model (charged like a chat call, drawn from
    the turn's hold: appended to `draws`); the deterministic rewrite when the model fails."""
    recent = "\n".join(f"{role}: {text[:600]}" for role, text in history[-4:])
    messages = [{"role": "system", "content": (
                    "Rewrite the user's last question as one standalone search query that names what it refers "
                    "to. Reply with the query only.")},
                {"role": "user", "content": f"Conversation:\n{recent}\n\nLast question: {question}"}]
    stream = llm.chat(messages, temperature=0.0, max_tokens=REWRITE_MAX_TOKENS)
    try:
        text = "".join(stream).strip().strip('"')
    except llm.ProviderError:
        return standalone_query(question, history)
    usage = stream.final_usage()
    if usage.total_tokens:
        draws.append(HoldDraw(key=key, kind=Kind.CHAT, tokens=usage.total_tokens,
                              model=stream.model, provider=stream.provider))
    return text.splitlines()[0][:MAX_QUESTION_CHARS] if text else standalone_query(question, history)


def _sources(passages, ocr_ids: set[int] = frozenset()) -> list[dict]:
    """Each passage as a numbered source; `"ocr": true` on one whose text was (partly) read
    by OCR (`ocr_ids`: its chunks' ids), so its citation says so."""
    return [{"n": n, "document_id": p.document_id, "document_name": p.document_name, "chunk_index": p.chunk_start,
             "pages": list(p.pages) if p.pages else None, "score": round(float(p.score), 4),
             **({"ocr": True} if ocr_ids.intersection(p.chunk_ids) else {})}
            for n, p in enumerate(passages, start=1)]


def turn_prepare(*, account, user=None, api_key=None, question, conversation_id=None,
                 history: list[tuple[str, str]] | None = None, request_id: str | None = None,
                 cancelled: threading.Event | None = None, options: TurnOptions | None = None,
                 authorize=None) -> ChatTurn:
    """Everything before the model call. Raises ChatError / InsufficientCredits /
    ProviderError with nothing held, charged or left half-written.

    `history` (role, text) replaces the stored conversation's (the OpenAI-compatible
    endpoint, whose clients send the whole conversation each time). `authorize()`, when
    given, runs first in the turn's first transaction and raises to refuse the turn (the
    websocket's re-check of its principal).

    Two transactions before the first token (docs/benchmarks.md, Chat): the first reads what
    the turn needs and takes the hold last, so the account's balance row stays locked only
    for that statement and the commit; the provider calls (follow-up rewrite, query
    embedding) run outside any transaction; the second retrieves and stores the question.
    What the turn spends before the answer is drawn from the hold and written when the hold
    is settled (`ChatTurn.draws`), so the balance row is locked twice a turn, not four times."""
    question = _question(question)
    options = options or TurnOptions()
    chosen = profile()
    check_chat_rate(account_id=account.pk, user_id=getattr(user, "pk", None),
                    api_key_id=getattr(api_key, "pk", None))
    request_id = request_id or uuid.uuid4().hex
    decision = route(question)
    # The principal spends (its budgets apply): the key on key surfaces, else the member.
    spender = {"user": user, "api_key": api_key}
    # The principal (user or key) is part of every context that reads documents: the
    # collections it may see follow from it, in the queries and in row-level security.
    # flush=False: these two commits do not wait for the disk. What they write (the question,
    # the conversation, the hold) is made durable by the settle's ordinary commit at the end
    # of the turn, before anything is acknowledged; a database crash in between fails the
    # turn with nothing charged (docs/benchmarks.md, Chat: a few ms of each turn's wait).
    with account_context(account, user=user, api_key=api_key, flush=False):
        if authorize is not None:
            authorize()
        new_conversation = conversation_id in (None, "")
        conversation = _conversation(account, conversation_id=conversation_id, user=user, api_key=api_key,
                                     question=question)
        if history is None:
            history = [] if new_conversation else _history(conversation)
        collection_ids = collection_ids_requested(account=account, requested=options.collection)
        if decision.reply:  # small talk: no search, no model, nothing held or charged
            user_message = rows.insert(Message, account_id=account.pk, conversation=conversation, role=Role.USER,
                                       content=question, route=GENERAL, end_user=options.end_user[:256])
            return ChatTurn(account_id=account.pk, conversation=conversation, user_message=user_message,
                            route=GENERAL, passages=[], sources=[], messages=[], temperature=0.0, hold=None,
                            request_id=request_id, reply=decision.reply, profile=chosen,
                            cancelled=cancelled or threading.Event(), spender=spender)
        # The query is embedded with the model the account's chunks are searched by.
        active = active_embedding_model(account_id=account.pk) \
            if decision.kind == LOOKUP else None
        hold = credits_hold(account=account, amount=_worst_case(question, history, decision.kind, options, chosen),
                            key=f"chat:{request_id}", reference=references.conversation(conversation.pk), **spender)
    draws: list[HoldDraw] = []
    try:
        query = question
        if decision.kind == LOOKUP and history and is_followup(question):
            query = (_rewrite_followup(question, history, key=f"chat:{request_id}:rewrite", draws=draws)
                     if chosen.rewrite else standalone_query(question, history))
        embedded = None
        if active is not None:
            embedded, draw = _embed(query, active, key=f"chat:{request_id}:query")
            draws.append(draw)
        with account_context(account, user=user, api_key=api_key, flush=False):
            try:
                kind, passages = _retrieve(account, decision.kind, decision.summary_target, query, embedded,
                                           chosen=chosen, collection_ids=collection_ids)
            except _NeedsEmbedding:  # a summary of no such document: the words are looked up
                active = active_embedding_model(account_id=account.pk)
                embedded, draw = _embed(query, active, key=f"chat:{request_id}:query")
                draws.append(draw)
                kind, passages = _retrieve(account, LOOKUP, "", query, embedded, chosen=chosen,
                                           collection_ids=collection_ids)
            note = NOT_IN_DOCUMENTS if decision.kind != GENERAL and kind == GENERAL else ""
            messages = build_messages(question=question, passages=passages, history=history,
                                      grounded=bool(passages), history_budget=settings.CHAT_HISTORY_TOKENS,
                                      instructions=options.system)
            sources = _sources(passages, ocr_chunk_ids(passages))
            user_message = rows.insert(
                Message, account_id=account.pk, conversation=conversation, role=Role.USER, content=question,
                route=kind, sources=sources, end_user=options.end_user[:256],
                query=query if decision.kind != GENERAL else "")
    except Exception:
        with account_context(account):
            hold_release(hold=hold, draws=draws)
        raise
    return ChatTurn(account_id=account.pk, conversation=conversation, user_message=user_message, route=kind,
                    passages=passages, sources=sources, messages=messages,
                    temperature=options.bounded_temperature(0.2 if passages else 0.7),
                    hold=hold, request_id=request_id, max_tokens=options.bounded_max_tokens(chosen.max_tokens),
                    query=user_message.query, note=note, profile=chosen, cancelled=cancelled or threading.Event(),
                    spender=spender, draws=draws)


def _citations(answer: str, sources: list[dict]) -> list[dict]:
    """The sources the answer cites as [Document N], in order of first citation; a marker
    with no such source is ignored, and an answer that cites nothing has no citations."""
    by_n = {s["n"]: s for s in sources}
    cited = []
    for match in answering.CITATION.finditer(answer):
        n = int(match.group(1))
        if n in by_n and by_n[n] not in cited:
            cited.append(by_n[n])
    return [{**{k: s[k] for k in ("n", "document_id", "document_name", "chunk_index", "pages")},
             **({"ocr": True} if s.get("ocr") else {})} for s in cited]


def turn_finish(turn: ChatTurn, *, failed: Exception | None = None) -> dict:
    """Settle the hold to the provider-reported usage (with what the turn drew from it before
    the answer) and persist the answer, in one transaction.

    Returns what `chat.done` carries. On a failed generation with nothing used, the hold
    is released (its draws still charged) and no answer is stored.
    """
    usage = turn.llm_stream.final_usage() if turn.llm_stream else llm.ChatUsage()
    used = usage.total_tokens if (turn.llm_stream and turn.llm_stream.generated or usage.reported) else 0
    account_id = turn.account_id
    with account_context(account_id=account_id):
        if failed is not None and not used:
            if turn.hold is not None:
                hold_release(hold=turn.hold, draws=turn.draws)
            return {}
        status = (MessageStatus.FAILED if failed is not None else
                  MessageStatus.CANCELLED if turn.cancelled.is_set() else MessageStatus.COMPLETE)
        # Stored with the charge it will have unless the balance falls short (corrected below).
        expected = pricing.credits_for(kind=pricing.CHAT, model=turn.llm_stream.model if turn.llm_stream else "",
                                       tokens=used) if turn.hold is not None and used else 0
        answer = rows.insert(
            Message, account_id=account_id, conversation=turn.conversation, role=Role.ASSISTANT, content=turn.answer,
            status=status, route=turn.route, sources=turn.sources, citations=_citations(turn.answer, turn.sources),
            prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens, model=turn.llm_stream.model if turn.llm_stream else "",
            provider=turn.llm_stream.provider if turn.llm_stream else "", credits_charged=expected,
            latency_ms=int((time.monotonic() - turn.started) * 1000),
            first_token_ms=int((turn.first_token_at - turn.started) * 1000) if turn.first_token_at else None,
            error_code=getattr(failed, "code", "") if failed else "")
        entry = None if turn.hold is None else hold_settle(
            hold=turn.hold, used_tokens=used, kind=Kind.CHAT, model=answer.model, provider=answer.provider,
            reference=references.message(answer.pk), draws=turn.draws,
            metadata={"estimated": not usage.reported} if not usage.reported else None)
        charged = -entry.delta if entry else 0
        if charged != expected:
            answer.credits_charged = charged
            rows.update(Message, pk=answer.pk, account_id=account_id, credits_charged=charged)
        rows.update(Conversation, pk=turn.conversation.pk, account_id=account_id, updated_at=timezone.now())
        # The charge is the last entry the settle wrote: its balance_after is the balance.
        remaining = entry.balance_after if entry else balance_get(account=account_id)
        # No budget when the hold was taken: nothing to read (billing.services.credits_hold).
        budget = None if getattr(turn.hold, "budget_free", False) else _tightest_budget(account_id, turn.spender)
    finish_reason = turn.finish_reason or (turn.llm_stream.finish_reason if turn.llm_stream else "") or "stop"
    return {"message_id": answer.pk, "conversation_id": turn.conversation.pk, "answer": answer.content,
            "citations": answer.citations, "status": answer.status, "finish_reason": finish_reason,
            "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                      "total_tokens": usage.total_tokens},
            "credits_remaining": remaining,
            # The principal's tightest budget after this turn (the header's "N left today"),
            # null without one.
            "budget_remaining": budget.remaining if budget else None,
            "budget_period": budget.period if budget else None}


def _tightest_budget(account_id: int, spender: dict):
    statuses = budget_status_for(account=account_id, user=spender.get("user"), api_key=spender.get("api_key"))
    return min(statuses, key=lambda s: s.remaining) if statuses else None
