"""The agent: route → hold credits → retrieve → prompt → stream → settle → persist.

`turn_prepare`, `ChatTurn.stream()` and `turn_finish` are the three steps of a turn;
`chat.driver.TurnRun` runs them in order for every surface (websocket, REST, SSE, the
OpenAI-compatible endpoint). No database transaction spans a model call: each step
opens its own account context. `turn_prepare` runs in steps: the hold (the first
transaction), the search query and its embedding (outside any), the retrieval and the
prompt (the second). What a turn reads from the documents is chat/retrieve.py; the turn
itself, its answer's stream and its settings are chat/turn.py.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

from django.contrib.auth.models import AnonymousUser
from django.db.models import Q
from django.utils import timezone

from accounts.models import Account, ApiKey, User
from billing import pricing, references
from billing.budgets import BudgetStatus, budget_status_for
from billing.errors import InsufficientCredits
from billing.models import CreditHold, Kind
from billing.selectors import balance_get
from billing.services import HoldDraw, hold_release, hold_settle
from chat import answering
from chat.error_codes import ChatErrorCode
from chat.errors import ChatError, ConversationError, ConversationNotFound, PromptTooLong
from chat.holds import credits_hold_fitting, fitted, hold_bounds
from chat.models import Conversation, Message, MessageStatus, Role
from chat.ratelimit import check_chat_rate
from chat.retrieve import MAX_QUESTION_CHARS, Retrieved, numbered_sources, search_query, turn_passages
from chat.router import GENERAL, LOOKUP, Route, route
from chat.selectors import conversation_access_by_id
from chat.services import conversation_default_title
from chat.turn import ChatTurn, Profile, Spender, TurnOptions, general_answers, profile
from core import rows
from core.error_codes import CoreErrorCode
from core.tenancy import account_context
from documents.embedding import active_embedding_model
from documents.models import ActiveEmbeddingModel
from documents.selectors import collection_ids_requested
from llm import client as llm
from retrieval.search import QueryEmbedding, query_embed

NOT_IN_DOCUMENTS = "Your team's documents don't cover this, so this is a general answer, not from your documents:\n\n"
NOT_COVERED = "Your documents don't cover this."


def _question(text) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ChatError(CoreErrorCode.BAD_REQUEST, "Type a question first.")
    if len(text) > MAX_QUESTION_CHARS:
        raise ChatError(
            CoreErrorCode.BAD_REQUEST,
            f"Questions are limited to {MAX_QUESTION_CHARS:,} characters; shorten it or split it in two.",
        )
    return text.strip()


@dataclass(frozen=True)
class _Asked:
    """A question, who asks it and how it is answered: what each step of `turn_prepare` reads."""

    account: Account
    user: User | AnonymousUser | None
    api_key: ApiKey | None
    question: str
    options: TurnOptions
    profile: Profile
    route: Route
    request_id: str
    cancelled: threading.Event
    # Regenerate: the stored question asked again (no new question is stored; its answer so
    # far becomes a previous version once the new one is stored).
    asked_again: Message | None = None

    @property
    def spender(self) -> Spender:
        """The principal spends (its budgets apply): the key on key surfaces, else the member."""
        return {"user": self.user, "api_key": self.api_key}

    def context(self):
        """The turn's account context. The principal (user or key) is part of every context
        that reads documents: the collections it may see follow from it, in the queries and
        in row-level security. flush=False: the two commits before the answer do not wait
        for the disk. What they write (the question, the conversation, the hold) is made
        durable by the settle's ordinary commit at the end of the turn, before anything is
        acknowledged; a database crash in between fails the turn with nothing charged
        (docs/benchmarks.md, Chat: a few ms of each turn's wait)."""
        return account_context(self.account, user=self.user, api_key=self.api_key, flush=False)


@dataclass
class _Opened:
    """What the turn's first transaction read, reserved or (small talk) stored."""

    conversation: Conversation
    history: list[tuple[str, str]]
    collection_ids: list[int] | None
    hold: CreditHold | None = None  # None: small talk
    active: ActiveEmbeddingModel | None = None  # a lookup's: the model its query is embedded with
    small_talk: Message | None = None  # small talk's question, stored in that transaction
    # Any other question, stored in that transaction too (with the hold), before any model
    # is asked: a turn that fails after it (the model server busy or unreachable) leaves it in
    # its conversation, to be retried (regenerate) without a second copy.
    question: Message | None = None
    draws: list[HoldDraw] = field(default_factory=list)


def _conversation(account, *, conversation_id, user, api_key, question: str, names_it: bool) -> Conversation:
    """The turn's conversation: a new one, named after its question when the question
    `names_it` (small talk, "hi", names nothing), or the principal's own, which its first real
    question names when it has no title yet (a title the person set is never replaced: none
    is empty)."""
    title = conversation_default_title(question) if names_it else ""
    if conversation_id in (None, ""):
        return rows.insert(
            Conversation,
            account_id=account.pk,
            user=user if getattr(user, "pk", None) else None,
            api_key=api_key,
            title=title,
        )
    # Another person's conversation, in this account too, answers like a missing one.
    conversation = conversation_access_by_id(
        account=account, conversation_id=conversation_id, user=user, api_key=api_key
    )
    if title and not conversation.title:
        # NOTE: only while still untitled, so a rename committed meanwhile is kept.
        Conversation.objects.for_account(account).filter(pk=conversation.pk, title="").update(title=title)
        conversation.title = title
    return conversation


def _history(conversation: Conversation, *, before: Message | None = None) -> list[tuple[str, str]]:
    """The conversation's turns the model reads: not failed answers, nor the previous versions
    of a regenerated one; `before`: only what came before that question."""
    messages = (
        Message.objects.for_account(conversation.account_id)
        .filter(conversation=conversation, replaced_by__isnull=True)
        .exclude(status=MessageStatus.FAILED)
    )
    if before is not None:
        messages = messages.filter(
            Q(created_at__lt=before.created_at) | Q(created_at=before.created_at, pk__lt=before.pk)
        )
    return list(messages.order_by("created_at", "pk").values_list("role", "content"))


def _last_question(account: Account, *, conversation_id, user, api_key, authorize) -> Message:
    """Regenerate: the last question of the principal's own conversation (ConversationNotFound
    alike for another's), or ConversationError when it has none."""
    if conversation_id in (None, ""):
        raise ChatError(
            CoreErrorCode.BAD_REQUEST, "Say which conversation's last answer to regenerate (`conversation_id`)."
        )
    with account_context(account, user=user, api_key=api_key):
        if authorize is not None:
            authorize()
        conversation = conversation_access_by_id(
            account=account, conversation_id=conversation_id, user=user, api_key=api_key
        )
        question = (
            Message.objects.for_account(account)
            .filter(conversation=conversation, role=Role.USER)
            .order_by("-created_at", "-pk")
            .first()
        )
    if question is None:
        raise ConversationError(
            ChatErrorCode.NOTHING_TO_REGENERATE,
            "This conversation has no question to ask again yet.",
            field="conversation_id",
        )
    return question


def turn_prepare(
    *,
    account: Account,
    user: User | AnonymousUser | None = None,
    api_key: ApiKey | None = None,
    question,
    conversation_id=None,
    history: list[tuple[str, str]] | None = None,
    request_id: str | None = None,
    cancelled: threading.Event | None = None,
    options: TurnOptions | None = None,
    authorize=None,
    regenerate: bool = False,
) -> ChatTurn:
    """Everything before the model call. Raises ChatError / InsufficientCredits /
    ProviderError with nothing held, charged or left half-written.

    `regenerate`: `question` is not given; the conversation's last question is asked again,
    over the history before it, as a new turn held and charged like any. No new question is
    stored; turn_finish makes the answer(s) it had previous versions (`replaced_by`).

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
    asked_again = None
    if regenerate:
        asked_again = _last_question(
            account, conversation_id=conversation_id, user=user, api_key=api_key, authorize=authorize
        )
        question = asked_again.content
    question = _question(question)
    options = (options or TurnOptions()).tags_checked()
    chosen = profile()
    check_chat_rate(account_id=account.pk, user_id=getattr(user, "pk", None), api_key_id=getattr(api_key, "pk", None))
    asked = _Asked(
        account=account,
        user=user,
        api_key=api_key,
        question=question,
        options=options,
        profile=chosen,
        route=route(question),
        request_id=request_id or uuid.uuid4().hex,
        cancelled=cancelled or threading.Event(),
        asked_again=asked_again,
    )
    opened = turn_hold(asked, conversation_id=conversation_id, history=history, authorize=authorize)
    if opened.hold is None:  # small talk
        return ChatTurn(
            account_id=account.pk,
            conversation=opened.conversation,
            user_message=opened.small_talk,
            request_id=asked.request_id,
            route=GENERAL,
            profile=chosen,
            cancelled=asked.cancelled,
            spender=asked.spender,
            reply=asked.route.reply,
            regenerates=asked.asked_again is not None,
        )
    try:
        query, embedded = turn_search_query(asked, opened)
        with asked.context():
            retrieved = turn_retrieve(asked, opened, query, embedded)
            return turn_prompt(asked, opened, query, retrieved)
    except (InsufficientCredits, PromptTooLong) as refused:
        # Refused once the passages were known (chat.holds.fitted: not even the best one fits
        # what the hold or the model's window allows): a refused turn charges nothing, its
        # query's embedding included, and says the account's balance, not the hold's. Its
        # question goes too: asking it again as it is cannot answer it (the person shortens
        # it or adds credits), so it is given back to be edited, as before it was stored.
        with account_context(account):
            hold_release(hold=opened.hold)
            balance = balance_get(account=account)
            _question_unstore(asked, opened)
        if isinstance(refused, InsufficientCredits):
            raise InsufficientCredits(needed=refused.needed, balance=balance) from None
        raise
    except Exception as exc:
        with account_context(account):
            hold_release(hold=opened.hold, draws=opened.draws)
        # The question stays (stored with the hold): the error says where it is, so every
        # surface can keep it in its conversation and offer to ask it again (regenerate).
        stored = opened.question or asked.asked_again
        if stored is not None:
            try:
                exc.stored_question = (opened.conversation.pk, stored.pk)  # type: ignore[attr-defined]
            except AttributeError:  # an exception type that takes no attributes: said without where
                pass
        raise


def turn_hold(asked: _Asked, *, conversation_id, history: list[tuple[str, str]] | None, authorize) -> _Opened:
    """The turn's first transaction: the principal's re-check, the conversation and its
    history, the collections asked for, the embedding model, and last the hold for the
    worst case. Small talk holds nothing: its question is stored here instead."""
    account, question, options, chosen = asked.account, asked.question, asked.options, asked.profile
    decision, request_id, spender = asked.route, asked.request_id, asked.spender
    with asked.context():
        if authorize is not None:
            authorize()
        conversation = _conversation(
            account,
            conversation_id=conversation_id,
            user=asked.user,
            api_key=asked.api_key,
            question=question,
            # A regenerated question is stored already: it named what it could.
            names_it=not decision.reply and asked.asked_again is None,
        )
        if history is None:
            history = [] if conversation_id in (None, "") else _history(conversation, before=asked.asked_again)
        opened = _Opened(
            conversation=conversation,
            history=history,
            collection_ids=collection_ids_requested(account=account, requested=options.collection),
        )
        if decision.reply:  # small talk: no search, no model, nothing held or charged
            opened.small_talk = _question_store(asked, conversation, route=GENERAL)
            return opened
        # Stored before any model is asked (the search query's embedding is the first call).
        opened.question = _question_store(asked, conversation, route=decision.kind)
        # The query is embedded with the model the account's chunks are searched by.
        opened.active = active_embedding_model(account_id=account.pk) if decision.kind == LOOKUP else None
        least, most = hold_bounds(
            question,
            history,
            decision.kind,
            options,
            chosen,
            embedding_model=opened.active.model if opened.active else None,
        )
        hold = credits_hold_fitting(
            account,
            least=least,
            most=most,
            key=f"chat:{request_id}",
            reference=references.conversation(conversation.pk),
            **spender,
        )
    opened.hold = hold
    return opened


def turn_search_query(asked: _Asked, opened: _Opened) -> tuple[str, QueryEmbedding | None]:
    """What the turn searches and, for a lookup, its embedding: provider calls outside any
    transaction, so no row lock or snapshot is held across them, drawn from the hold."""
    if asked.route.kind != LOOKUP:
        return asked.question, None  # a summary searches only when its document is not there
    query = search_query(
        asked.question,
        opened.history,
        rewrite=asked.profile.rewrite,
        key=f"chat:{asked.request_id}:rewrite",
        draws=opened.draws,
    )
    return query, query_embed(
        account=asked.account,
        query=query,
        key=f"chat:{asked.request_id}:query",
        hold=opened.hold,
        draws=opened.draws,
        active=opened.active,
    )


def turn_retrieve(asked: _Asked, opened: _Opened, query: str, embedded: QueryEmbedding | None) -> Retrieved:
    """The passages for the turn's route, in the turn's second transaction."""
    return turn_passages(
        account=asked.account,
        route=asked.route,
        query=query,
        embedded=embedded,
        collection_ids=opened.collection_ids,
        hold=opened.hold,
        draws=opened.draws,
        key=f"chat:{asked.request_id}:query",
        limit=asked.profile.passages,
        tags=asked.options.tags,
        exclude_tags=asked.options.exclude_tags,
    )


def turn_prompt(asked: _Asked, opened: _Opened, query: str, retrieved: Retrieved) -> ChatTurn:
    """The model's messages over what was retrieved, and the question stored with its
    numbered sources (in the retrieval's transaction): the turn, ready to stream. What the
    documents do not cover, on a model not trusted with general knowledge: "Your documents
    don't cover this." with the closest passages as sources, and no model call (the hold is
    settled to what retrieval drew from it)."""
    options = asked.options
    if asked.route.kind != GENERAL and retrieved.route == GENERAL and not general_answers(asked.profile):
        sources = numbered_sources(retrieved.nearest)
        reply = NOT_COVERED + (" The closest passages I found are listed below." if sources else "")
        return ChatTurn(
            account_id=asked.account.pk,
            conversation=opened.conversation,
            user_message=_question_update(asked, opened, route=GENERAL, sources=sources, query=query),
            request_id=asked.request_id,
            route=GENERAL,
            profile=asked.profile,
            cancelled=asked.cancelled,
            spender=asked.spender,
            sources=sources,
            hold=opened.hold,
            query=query,
            draws=opened.draws,
            reply=reply,
            regenerates=asked.asked_again is not None,
        )
    passages, messages, max_tokens = fitted(
        question=asked.question,
        options=options,
        chosen=asked.profile,
        history=opened.history,
        hold=opened.hold,
        draws=opened.draws,
        passages=retrieved.passages,
    )
    sources = numbered_sources(passages)
    searched = query if asked.route.kind != GENERAL else ""
    user_message = _question_update(asked, opened, route=retrieved.route, sources=sources, query=searched)
    return ChatTurn(
        account_id=asked.account.pk,
        conversation=opened.conversation,
        user_message=user_message,
        request_id=asked.request_id,
        route=retrieved.route,
        profile=asked.profile,
        cancelled=asked.cancelled,
        spender=asked.spender,
        passages=passages,
        sources=sources,
        messages=messages,
        temperature=options.bounded_temperature(0.2 if passages else 0.7),
        hold=opened.hold,
        max_tokens=max_tokens,
        query=searched,
        draws=opened.draws,
        regenerates=asked.asked_again is not None,
        note=NOT_IN_DOCUMENTS if asked.route.kind != GENERAL and retrieved.route == GENERAL else "",
    )


def _question_store(
    asked: _Asked, conversation: Conversation, *, route: str, sources: list[dict] | None = None, query: str = ""
) -> Message:
    if asked.asked_again is not None:  # regenerate: the question is stored already
        return asked.asked_again
    return rows.insert(
        Message,
        account_id=asked.account.pk,
        conversation=conversation,
        role=Role.USER,
        content=asked.question,
        route=route,
        sources=sources or [],
        end_user=asked.options.end_user[:256],
        query=query,
    )


def _question_update(asked: _Asked, opened: _Opened, *, route: str, sources: list[dict], query: str) -> Message:
    """The question stored by turn_hold, with what its retrieval found (its route, numbered
    sources and the query searched), in the retrieval's transaction. A regenerated question
    keeps what it was stored with."""
    question = opened.question
    if asked.asked_again is not None or question is None:
        return asked.asked_again or _question_store(
            asked, opened.conversation, route=route, sources=sources, query=query
        )
    question.route, question.sources, question.query = route, sources, query
    rows.update(Message, pk=question.pk, account_id=question.account_id, route=route, sources=sources, query=query)
    return question


def _question_unstore(asked: _Asked, opened: _Opened) -> None:
    """A refused turn's question is taken back (never a regenerated one, stored before)."""
    if opened.question is not None and asked.asked_again is None:
        Message.objects.for_account(asked.account).filter(pk=opened.question.pk).delete()


def _citations(answer: str, sources: list[dict]) -> list[dict]:
    """The sources the answer cites as [Document N], in order of first citation; a marker
    with no such source is ignored, and an answer that cites nothing has no citations."""
    by_n = {s["n"]: s for s in sources}
    cited = []
    for match in answering.CITATION.finditer(answer):
        n = int(match.group(1))
        if n in by_n and by_n[n] not in cited:
            cited.append(by_n[n])
    return [
        {
            **{k: s[k] for k in ("n", "document_id", "document_name", "chunk_index", "pages")},
            **({"ocr": True} if s.get("ocr") else {}),
        }
        for s in cited
    ]


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
        # NOTE: locked as chat.services.conversation_delete locks it: deleted meanwhile, the
        # answer is not stored (there is nothing to store it in) and what was used is charged.
        gone = (
            not Conversation.objects.for_account(account_id)
            .select_for_update()
            .filter(pk=turn.conversation.pk)
            .exists()
        )
        if gone:
            if turn.hold is not None:
                hold_settle(
                    hold=turn.hold,
                    used_tokens=used,
                    kind=Kind.CHAT,
                    draws=turn.draws,
                    model=turn.llm_stream.model if turn.llm_stream else "",
                    reference=references.conversation(turn.conversation.pk),
                )
        else:
            result = _answer_store(turn, usage=usage, used=used, failed=failed)
    if gone:
        raise ConversationNotFound("This conversation was deleted while its answer was written.")
    return result


def _answer_store(turn: ChatTurn, *, usage, used: int, failed: Exception | None) -> dict:
    """turn_finish's answer and settle, in its transaction with the conversation locked."""
    account_id = turn.account_id
    status = (
        MessageStatus.FAILED
        if failed is not None
        else MessageStatus.CANCELLED
        if turn.cancelled.is_set()
        else MessageStatus.COMPLETE
    )
    # Stored with the charge it will have unless the balance falls short (corrected below).
    expected = (
        pricing.credits_for(kind=pricing.CHAT, model=turn.llm_stream.model if turn.llm_stream else "", tokens=used)
        if turn.hold is not None and used
        else 0
    )
    answer = rows.insert(
        Message,
        account_id=account_id,
        conversation=turn.conversation,
        role=Role.ASSISTANT,
        content=turn.answer,
        status=status,
        route=turn.route,
        sources=turn.sources,
        citations=_citations(turn.answer, turn.sources),
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        model=turn.llm_stream.model if turn.llm_stream else "",
        provider=turn.llm_stream.provider if turn.llm_stream else "",
        credits_charged=expected,
        latency_ms=int((time.monotonic() - turn.started) * 1000),
        first_token_ms=int((turn.first_token_at - turn.started) * 1000) if turn.first_token_at else None,
        error_code=getattr(failed, "code", "") if failed else "",
    )
    entry = (
        None
        if turn.hold is None
        else hold_settle(
            hold=turn.hold,
            used_tokens=used,
            kind=Kind.CHAT,
            model=answer.model,
            provider=answer.provider,
            reference=references.message(answer.pk),
            draws=turn.draws,
            metadata={"estimated": not usage.reported} if not usage.reported else None,
        )
    )
    if turn.regenerates and status != MessageStatus.FAILED and answer.content:
        # The question's earlier answers stay, as previous versions of this one (one stopped
        # before any text, or cut off by an error, replaces nothing).
        (
            Message.objects.for_account(account_id)
            .filter(
                conversation=turn.conversation,
                role=Role.ASSISTANT,
                replaced_by__isnull=True,
                created_at__gte=turn.user_message.created_at,
            )
            .exclude(pk=answer.pk)
            .update(replaced_by=answer)
        )
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
    return {
        "message_id": answer.pk,
        "conversation_id": turn.conversation.pk,
        "answer": answer.content,
        "citations": answer.citations,
        "status": answer.status,
        "finish_reason": finish_reason,
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
        "credits_remaining": remaining,
        # What the answer cost (its tokens at the answering model's price, billing.pricing).
        "credits_charged": answer.credits_charged,
        # The principal's tightest budget after this turn (the header's "N left today"),
        # null without one.
        "budget_remaining": budget.remaining if budget else None,
        "budget_period": budget.period if budget else None,
    }


def _tightest_budget(account_id: int, spender: Spender) -> BudgetStatus | None:
    statuses = budget_status_for(account=account_id, user=spender.get("user"), api_key=spender.get("api_key"))
    return min(statuses, key=lambda s: s.remaining) if statuses else None
