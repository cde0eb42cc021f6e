"""What a chat turn holds and how its prompt fits the hold: the worst case and the least of a
turn (`hold_bounds`), the hold taken down to what the balance and budgets allow
(`credits_hold_fitting`), and the prompt and answer fitted to it (`fitted`), so no chat turn
is charged more than it held (docs/architecture.md, "A chat turn's path"). The prompt is
counted as the model that charges counts it (llm/chat_tokens.py)."""

from __future__ import annotations

from django.conf import settings

from accounts.models import Account
from billing import pricing
from billing.errors import BudgetExceeded, InsufficientCredits
from billing.models import CreditHold
from billing.services import HoldDraw, credits_hold
from chat import answering
from chat.errors import PromptTooLong
from chat.prompt import build_messages
from chat.retrieve import REWRITE_MAX_TOKENS, SUMMARY_CHUNKS, rewrite_messages
from chat.router import GENERAL, LOOKUP, SUMMARY, previous_question, standalone_query
from chat.turn import Profile, TurnOptions
from llm import chat_tokens
from llm.embedding_specs import Purpose
from llm.embedding_tokens import input_tokens_bound

# The least answer a turn is held for: a few sentences (below it the turn is refused).
MIN_ANSWER_TOKENS = 64

# The fewest words of the best passage a turn is answered from; fewer would read as "not
# in your documents", so the turn is refused instead (before anything is spent, when the
# balance cannot even hold that much: hold_bounds' least).
MIN_PASSAGE_WORDS = 40


def min_passage_tokens() -> int:
    """What MIN_PASSAGE_WORDS of a passage are expected to take (~7 characters a word)."""
    return chat_tokens.passage_tokens_allowance(MIN_PASSAGE_WORDS * 7)


def _serving_models() -> list[str]:
    """The chat models that may answer (or rewrite) for a turn: CHAT_MODEL and its fallback,
    whose highest price the hold covers (billing.pricing)."""
    return pricing.serving_models(pricing.CHAT)


def _embedding_models(model: str | None) -> list[str] | None:
    """The model that embeds the turn's query (the account's active one, when the caller read
    it); None: any, at the highest embedding price."""
    return [model] if model else None


def hold_bounds(
    question: str,
    history: list[tuple[str, str]],
    kind: str,
    options: TurnOptions,
    chosen: Profile,
    *,
    embedding_model: str | None = None,
) -> tuple[int, int]:
    """(least, most) credits to hold for the turn. Most: its worst case, the prompt counted as
    the model that charges counts it (llm/chat_tokens.py: the bundled model's own tokenizer,
    else UTF-8 bytes, which no provider's tokenizer exceeds) with the passages' allowance and
    the longest answer. Least: the prompt with MIN_PASSAGE_WORDS of a passage (none on the
    general route) and a short answer, below which the turn is refused before anything is
    spent.
    Both are fitted to the chat model's context window: a prompt and answer never pass it, and
    a prompt that cannot fit it with a short answer is refused (PromptTooLong, nothing held).
    Whatever is held, the prompt and the answer are fitted to it (`fitted`), so a chat turn is
    never charged more than its hold."""
    passages = {GENERAL: 0, LOOKUP: chosen.passages or settings.RAG_TOP_K * 3, SUMMARY: SUMMARY_CHUNKS}[kind]
    bare = max(
        prompt_bound(question, [], history, options, grounded=grounded, chosen=chosen) for grounded in (True, False)
    )
    window = chat_tokens.context_window()
    if window is not None and bare + MIN_ANSWER_TOKENS > window:
        raise PromptTooLong(prompt_tokens=bare, window=window)
    passage = chat_tokens.passage_tokens_allowance(settings.CHUNK_SIZE)
    least = bare + min(passages, 1) * min_passage_tokens() + MIN_ANSWER_TOKENS
    most = bare + passages * passage + options.bounded_max_tokens(chosen.max_tokens)
    if window is not None:
        least, most = min(least, window), min(most, window)
    retrieval = retrieval_worst_case(question, history, kind, chosen, embedding_model=embedding_model)
    least, most = (
        pricing.credits_at_most(kind=pricing.CHAT, models=_serving_models(), tokens=tokens) + retrieval
        for tokens in (least, most)
    )
    return least, max(least, most)


def prompt_messages(
    question: str,
    passages: list,
    history: list[tuple[str, str]],
    options: TurnOptions,
    *,
    grounded: bool,
    chosen: Profile,
) -> list[dict]:
    """The model's messages; on a profile with `prompt_words`, the passages cut to what is
    nearest the question (the guard and the sources keep them whole)."""
    if chosen.prompt_words:
        passages = answering.focused(question, passages, chosen.prompt_words)
    return build_messages(
        question=question,
        passages=passages,
        history=history,
        grounded=grounded,
        history_budget=chosen.history_tokens or settings.CHAT_HISTORY_TOKENS,
        instructions=options.system,
        style=chosen.prompt,
    )


def prompt_bound(
    question: str,
    passages: list,
    history: list[tuple[str, str]],
    options: TurnOptions,
    *,
    grounded: bool,
    chosen: Profile,
) -> int:
    messages = prompt_messages(question, passages, history, options, grounded=grounded, chosen=chosen)
    return chat_tokens.prompt_tokens_bound([m["content"] for m in messages])


def credits_hold_fitting(account: Account, *, least: int, most: int, key: str, reference: str, **spender) -> CreditHold:
    """The worst case held or, when the balance or a budget cannot cover it, what they can,
    down to `least` (the turn then reads fewer passages or answers shorter). Below `least`,
    refused as the error says."""
    try:
        return credits_hold(account=account, amount=most, key=key, reference=reference, **spender)
    except InsufficientCredits as short:
        affordable, refusal = short.balance, InsufficientCredits(needed=least, balance=short.balance)
    except BudgetExceeded as short:
        affordable, refusal = short.limit - short.spent, short
    if affordable < least:
        raise refusal
    return credits_hold(account=account, amount=affordable, key=key, reference=reference, **spender)


def fitted(
    *,
    question: str,
    options: TurnOptions,
    chosen: Profile,
    history: list[tuple[str, str]],
    hold: CreditHold,
    draws: list[HoldDraw],
    passages: list,
) -> tuple[list, list[dict], int]:
    """(passages, messages, max_tokens) that the turn's hold pays for whatever the model's
    tokenizer makes of them, within the chat model's context window: the passages ranked last
    are left out until the prompt's bound and a short answer fit in what the hold has left
    after its draws, and the answer may use the rest (the model stops there: finish_reason
    "length"). The best passage, when it does not fit whole, is cut to its sentences nearest
    the question. Refused (InsufficientCredits, PromptTooLong) only when not even a few of its
    sentences fit: turn_prepare then releases the hold and charges nothing."""
    left = hold.amount - sum(pricing.credits_for(kind=d.kind, model=d.model, tokens=d.tokens) for d in draws)
    within = pricing.tokens_within(kind=pricing.CHAT, credits=left, models=_serving_models())
    window = chat_tokens.context_window()
    if window is not None:
        within = min(within, window)
    wanted = options.bounded_max_tokens(chosen.max_tokens)

    def attempt(candidates: list) -> tuple[list[dict], int] | None:
        messages = prompt_messages(question, candidates, history, options, grounded=bool(candidates), chosen=chosen)
        prompt = chat_tokens.prompt_tokens_bound([m["content"] for m in messages])
        return (messages, prompt) if prompt + MIN_ANSWER_TOKENS <= within else None

    done = attempt(passages)
    while done is None and len(passages) > 1:
        passages = passages[:-1]
        done = attempt(passages)
    if done is None and passages:
        passages = _best_passage_cut(question, passages[0], attempt)
        done = attempt(passages)
    if done is None:
        messages = prompt_messages(question, passages, history, options, grounded=bool(passages), chosen=chosen)
        prompt = chat_tokens.prompt_tokens_bound([m["content"] for m in messages])
        if window is not None and prompt + MIN_ANSWER_TOKENS > window:
            raise PromptTooLong(prompt_tokens=prompt, window=window)
        drawn = hold.amount - left
        needed = drawn + pricing.credits_at_most(
            kind=pricing.CHAT, models=_serving_models(), tokens=prompt + MIN_ANSWER_TOKENS
        )
        raise InsufficientCredits(needed=needed, balance=hold.amount)
    messages, prompt = done
    return passages, messages, max(1, min(wanted, within - prompt))


def _best_passage_cut(question: str, passage, attempt) -> list:
    """[the passage cut to its sentences nearest the question (chat.answering.focused), as
    many words as fit], or [the passage cut to MIN_PASSAGE_WORDS] when not even those fit
    (the caller refuses the turn then)."""
    low, high = MIN_PASSAGE_WORDS, len(passage.text.split())
    best = answering.focused(question, [passage], low)
    if attempt(best) is None:
        return best
    while low < high:  # the most words that fit
        middle = (low + high + 1) // 2
        if attempt(answering.focused(question, [passage], middle)) is None:
            high = middle - 1
        else:
            low = middle
    return answering.focused(question, [passage], low)


def retrieval_worst_case(
    question: str, history: list[tuple[str, str]], kind: str, chosen: Profile, *, embedding_model: str | None = None
) -> int:
    """The most a turn spends before its answer: the follow-up rewrite (a chat call) and the
    query embedding. The turn's hold covers them too and they are drawn from it, so the
    balance and the principal's budgets refuse a turn before anything runs, never halfway.
    The embedding is counted as the account's model counts it, prefix included, exactly for
    the bundled models and by its UTF-8 bytes for another provider's, or when the model is
    not known yet, which no tokenizer exceeds (llm/embedding_tokens.py)."""
    if kind == GENERAL:
        return 0
    searched = standalone_query(question, history)
    query = input_tokens_bound(
        searched,
        model=embedding_model or settings.EMBEDDING_MODEL,
        purpose=Purpose.QUERY,
        exact=settings.LLM_BUNDLED and embedding_model is not None,
    )
    if not (previous_question(question, history) and chosen.rewrite):
        return pricing.credits_at_most(kind=pricing.EMBEDDING, models=_embedding_models(embedding_model), tokens=query)
    # The model's rewrite (at most REWRITE_MAX_TOKENS, with [CLS] and [SEP]) or, when it
    # fails, the deterministic query.
    rewrite = (
        chat_tokens.prompt_tokens_bound([m["content"] for m in rewrite_messages(question, history)])
        + REWRITE_MAX_TOKENS
    )
    return pricing.credits_at_most(
        kind=pricing.CHAT, models=_serving_models(), tokens=rewrite
    ) + pricing.credits_at_most(
        kind=pricing.EMBEDDING, models=_embedding_models(embedding_model), tokens=max(query, REWRITE_MAX_TOKENS + 2)
    )
