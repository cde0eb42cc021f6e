"""Money: an exact amount in one currency, with that currency's precision.

Stripe counts amounts in the currency's smallest unit (cents for USD, yen for JPY, fils for
KWD): `Money.of_minor(1000, "usd")` is 10.00 USD. Amounts are Decimals, never floats, so a
price per 1,000 tokens that is a fraction of a cent stays exact ("0.0013 USD"), and nothing
divides minor units by 100 for a currency that has no cents or three decimals.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

# Currencies whose smallest unit is the whole unit (Stripe's zero-decimal currencies).
ZERO_DECIMAL_CURRENCIES = frozenset(
    {"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"}
)
# Currencies with three decimals (ISO 4217; Stripe's three-decimal currencies).
THREE_DECIMAL_CURRENCIES = frozenset({"bhd", "jod", "kwd", "omr", "tnd"})


def exponent(currency: str) -> int:
    """How many decimals the currency's amounts have (ISO 4217's minor unit): 0, 2 or 3."""
    currency = (currency or "").lower()
    if currency in ZERO_DECIMAL_CURRENCIES:
        return 0
    return 3 if currency in THREE_DECIMAL_CURRENCIES else 2


@dataclass(frozen=True)
class Money:
    amount: Decimal  # in the currency's main unit (dollars, yen)
    currency: str  # lower-case ISO 4217 code, as Stripe writes it

    @classmethod
    def of_minor(cls, minor: int | Decimal, currency: str) -> Money:
        """`minor` of the currency's smallest unit (what Stripe's amounts count)."""
        currency = (currency or "").lower()
        return cls(Decimal(minor).scaleb(-exponent(currency)), currency)

    def __sub__(self, other: Money) -> Money:
        if other.currency != self.currency:
            raise ValueError(f"{other} cannot be taken from {self}: another currency")
        return Money(self.amount - other.amount, self.currency)

    def __mul__(self, factor: int | Decimal) -> Money:
        return Money(self.amount * Decimal(factor), self.currency)

    def __truediv__(self, divisor: int | Decimal) -> Money:
        return Money(self.amount / Decimal(divisor), self.currency)

    def minor_rounded_up(self) -> int:
        """The amount in the currency's smallest unit, a fraction of it rounded up (what a
        charge can ask for)."""
        return int(self.amount.scaleb(exponent(self.currency)).to_integral_value(rounding="ROUND_CEILING"))

    def __str__(self) -> str:
        """ "1,234.50 USD", "500 JPY": the currency's decimals, more only where an exact
        fraction of its smallest unit needs them ("0.0013 USD")."""
        places = exponent(self.currency)
        shown = self.amount.quantize(Decimal(1).scaleb(-places))
        if shown != self.amount:  # a fraction of a cent: all of it, without trailing zeros
            shown = self.amount.normalize()
            fraction = shown.as_tuple().exponent
            if isinstance(fraction, int):  # always, for a finite amount ("n", "N", "F": NaN, infinity)
                places = max(places, -fraction)
        return f"{shown:,.{places}f} {self.currency.upper()}"


def credits_price(credits: int) -> Money:
    """What buying `credits` costs at CREDITS_PRICE_CENTS_PER_1K in STRIPE_CURRENCY, exactly
    (a fraction of the smallest unit is possible; a purchase rounds it up: purchase_amount)."""
    return Money.of_minor(settings.CREDITS_PRICE_CENTS_PER_1K, settings.STRIPE_CURRENCY) * credits / 1000


def purchase_amount_minor(credits: int) -> int:
    """What a purchase of `credits` charges, in the currency's smallest unit: the exact price
    rounded up to a whole unit, at least 1."""
    return max(1, credits_price(credits).minor_rounded_up())


def purchase_price(credits: int) -> Money:
    """What a purchase of `credits` charges (purchase_amount_minor, as Money)."""
    return Money.of_minor(purchase_amount_minor(credits), settings.STRIPE_CURRENCY)
