"""Credits for a usage: the one rule every charge, hold, estimate and preflight asks.

A usage is a kind of provider call (an embedding, a chat completion, an image described by
a vision model), the model that served it and the tokens the provider reported (or, for an
estimate, counted ahead). settings.CREDITS_PER_1K_TOKENS prices it: the entry
"<kind>:<model>" when there is one, else "<kind>"; vision without a price of its own is
priced as chat. Credits are rounded up, and a provider call costs at least
MIN_CREDITS_PER_CALL, also one that reports 0 tokens. The default prices every kind at
1,000 credits per 1,000 tokens: 1 credit = 1 token.

The ledger keeps both numbers: an entry's `tokens` (what the provider reported) and its
`delta` (the credits), so a price other than 1:1 changes the second only.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

EMBEDDING = "embedding"
CHAT = "chat"
VISION = "vision"
USAGE_KINDS = (EMBEDDING, CHAT, VISION)
MIN_CREDITS_PER_CALL = 1  # a provider call that reports 0 tokens still costs one credit

# The ledger's kind of a usage (billing.models.Kind): a description of an image is a chat
# call on the ledger, whatever its price.
_LEDGER_KIND = {EMBEDDING: "embedding", CHAT: "chat", VISION: "chat"}
_PRICED_AS = {VISION: CHAT}


def ledger_kind(kind: str) -> str:
    """The ledger entry's kind for a usage of `kind`."""
    return _LEDGER_KIND[kind]


def _rates(kind: str) -> dict[str, int]:
    """CREDITS_PER_1K_TOKENS's entries for `kind`: "" for the kind's own price, else a model."""
    rates = {}
    for name, rate in settings.CREDITS_PER_1K_TOKENS.items():
        priced, _, model = str(name).partition(":")
        if priced != kind:
            continue
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 0:
            raise ImproperlyConfigured(f"CREDITS_PER_1K_TOKENS[{name!r}] must be a whole number, 0 or more.")
        rates[model] = rate
    if "" not in rates:
        if kind in _PRICED_AS:
            return {**_rates(_PRICED_AS[kind]), **rates}
        raise ImproperlyConfigured(f"CREDITS_PER_1K_TOKENS has no price for {kind!r}.")
    return rates


def _priced(tokens: int, rate: int) -> int:
    return max(MIN_CREDITS_PER_CALL, -(-tokens * rate // 1000))


def serving_models(kind: str) -> list[str]:
    """The models that serve calls of `kind` as configured: chat, CHAT_MODEL then
    CHAT_FALLBACK_MODEL (llm.client falls back to it with the same parameters); vision,
    VISION_MODEL; embedding, EMBEDDING_MODEL (an account's active model may be another one
    while a migration runs: those callers pass theirs)."""
    names = {
        CHAT: [settings.CHAT_MODEL, settings.CHAT_FALLBACK_MODEL],
        VISION: [settings.VISION_MODEL],
        EMBEDDING: [settings.EMBEDDING_MODEL],
    }[kind]
    return list(dict.fromkeys(name for name in names if name))


def rate(*, kind: str, model: str = "") -> int:
    """Credits per 1,000 tokens of a call of `kind` served by `model`."""
    rates = _rates(kind)
    return rates.get(model, rates[""]) if model else rates[""]


def credits_for(*, kind: str, tokens: int, model: str = "") -> int:
    """What one provider call of `kind` by `model` that reported `tokens` costs, in credits."""
    return _priced(tokens, rate(kind=kind, model=model))


def _highest(kind: str, models) -> int:
    """The highest price among `models` for `kind`; None: among every price of the kind (an
    embedding hold taken before the account's active model is read)."""
    if models is None:
        return max(_rates(kind).values())
    models = list(models)
    return max(rate(kind=kind, model=m) for m in models) if models else rate(kind=kind)


def credits_at_most(*, kind: str, tokens: int, models: list[str] | None = None) -> int:
    """What a call of `kind` with `tokens` may cost whichever of `models` serves it (a hold
    taken before the provider, or its fallback, is chosen): at the highest of their prices.
    `models` None: the highest price of the kind."""
    return _priced(tokens, _highest(kind, models))


def tokens_within(*, kind: str, credits: int, models: list[str] | None = None) -> int:
    """The most tokens a call of `kind` may use, on any of `models`, for at most `credits`
    (what a chat turn's hold leaves for its answer call: the inverse of credits_at_most)."""
    price = _highest(kind, models)
    return max(0, credits) * 1000 // price if price else 1_000_000_000


@dataclass(frozen=True)
class Price:
    """One row of the prices in effect (the Credits page's table)."""

    kind: str
    model: str  # "" for "any other model" of the kind
    credits_per_1k: int


def prices_in_effect() -> list[Price]:
    """Every price a call may be charged at: the models configured to serve each kind, the
    models priced by name in CREDITS_PER_1K_TOKENS, and each kind's price for any other model
    (vision only when VISION_MODEL is set)."""
    rows = []
    for kind in (CHAT, EMBEDDING, VISION):
        if kind == VISION and not settings.VISION_MODEL:
            continue
        named = [
            m
            for m in _rates(kind)
            if m and not (kind in _PRICED_AS and f"{kind}:{m}" not in settings.CREDITS_PER_1K_TOKENS)
        ]
        for model in dict.fromkeys([*serving_models(kind), *named]):
            rows.append(Price(kind=kind, model=model, credits_per_1k=rate(kind=kind, model=model)))
        rows.append(Price(kind=kind, model="", credits_per_1k=rate(kind=kind)))
    return rows


def price_note(entry) -> str:
    """Why a charge's credits differ from its tokens, in a person's words ("" when they do
    not): the model's price per 1,000 tokens (the price in effect, or, when it changed since,
    the one the entry was charged at)."""
    tokens, credits = entry.tokens or 0, -(entry.delta or 0)
    if tokens <= 0 or credits <= 0 or credits == tokens or entry.kind not in (EMBEDDING, CHAT):
        return ""
    metadata = entry.metadata if isinstance(entry.metadata, dict) else {}
    kind = VISION if metadata.get("purpose") == "image_description" else entry.kind
    model = entry.model or f"this {kind} model"
    try:
        current = rate(kind=kind, model=entry.model or "")
    except (ImproperlyConfigured, KeyError):
        current = None
    if current is not None and _priced(tokens, current) == credits:
        return f"{tokens:,} tokens · {credits:,} credits: {model} is priced at {current:,} credits per 1,000 tokens."
    return (
        f"{tokens:,} tokens · {credits:,} credits: {model} was priced at about "
        f"{round(credits * 1000 / tokens):,} credits per 1,000 tokens when this was charged."
    )


def price_text() -> str:
    """The price in a person's words, for the pages that show a balance."""
    prices = {str(name): rate for name, rate in settings.CREDITS_PER_1K_TOKENS.items()}
    if set(prices.values()) == {1000}:
        return "1 credit = 1 model token"
    return "Credits per 1,000 model tokens: " + ", ".join(
        f"{name.replace(':', ' ')} {rate:,}" for name, rate in sorted(prices.items())
    )
