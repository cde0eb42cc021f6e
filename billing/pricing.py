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


def credits_for(*, kind: str, tokens: int, model: str = "") -> int:
    """What one provider call of `kind` by `model` that reported `tokens` costs, in credits."""
    rates = _rates(kind)
    return _priced(tokens, rates.get(model, rates[""]) if model else rates[""])


def credits_at_most(*, kind: str, tokens: int) -> int:
    """What a call of `kind` with `tokens` may cost whichever model serves it (a hold taken
    before the provider, or its fallback, is chosen): at the highest price of the kind."""
    return _priced(tokens, max(_rates(kind).values()))


def tokens_within(*, kind: str, credits: int) -> int:
    """The most tokens a call of `kind` may use, on any model, for at most `credits` (what a
    chat turn's hold leaves for its answer call: the inverse of credits_at_most)."""
    return max(0, credits) * 1000 // max(_rates(kind).values())


def price_text() -> str:
    """The price in a person's words, for the pages that show a balance."""
    prices = {str(name): rate for name, rate in settings.CREDITS_PER_1K_TOKENS.items()}
    if set(prices.values()) == {1000}:
        return "1 credit = 1 model token"
    return "Credits per 1,000 model tokens: " + ", ".join(
        f"{name.replace(':', ' ')} {rate:,}" for name, rate in sorted(prices.items()))
