"""Writes to the credit ledger. The only code that creates ledger entries.

Every operation is idempotent by its key (unique per account): the same call twice changes
nothing the second time and returns the same result; the same key with a different amount
is refused, because a key names one operation. Spenders of one account are serialised on
its balance row (SELECT … FOR UPDATE), and a CHECK keeps the balance at or above zero.

Each operation is one SQL function, written once (billing/migrations/0007): billing_debit,
billing_hold, billing_hold_close (settle and release) and billing_grant, run as the app's
role under RLS, in the caller's transaction. Usually one round trip: a second one only for a
spender with a budget, checked here (billing.budgets) under the row lock the first took.
What a usage costs in credits is billing.pricing's to say; this module records it.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from accounts.models import Account
from audit.actors import SYSTEM
from audit.services import audit_record
from billing import pricing
from billing.alerts import low_balance_check, low_balance_rearm
from billing.budgets import Spender, budget_require
from billing.error_codes import BillingErrorCode
from billing.errors import BillingError, IdempotencyConflict, InsufficientCredits
from billing.models import AccountBalance, CreditHold, CreditLedgerEntry, HoldStatus, Kind
from billing.pricing import MIN_CREDITS_PER_CALL
from core import metrics
from core.error_codes import CoreErrorCode

__all__ = [
    "credits_grant",
    "credits_take_back",
    "credits_debit",
    "credits_hold",
    "hold_settle",
    "hold_release",
    "HoldDraw",
    "MIN_CREDITS_PER_CALL",
    "starting_credits_grant",
]

GRANT_KINDS = {Kind.GRANT, Kind.SIGNUP, Kind.REFUND, Kind.ADJUSTMENT}
_ENTRY_COLUMNS = [field.attname for field in CreditLedgerEntry._meta.concrete_fields]
_HOLD_COLUMNS = [field.attname for field in CreditHold._meta.concrete_fields]


def _positive(amount, what: str) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise BillingError(
            CoreErrorCode.INVALID_AMOUNT, f"{what} must be a whole number greater than zero (got {amount!r})."
        )
    return amount


def _tokens(tokens, what: str = "Tokens") -> int:
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise BillingError(
            CoreErrorCode.INVALID_AMOUNT, f"{what} must be a whole number, zero or more (got {tokens!r})."
        )
    return tokens


def _usage_kind(kind: str) -> str:
    if kind not in pricing.USAGE_KINDS:
        raise BillingError(CoreErrorCode.INVALID_KIND, f"{kind} is not a kind of spending.")
    return kind


def _key(key: str) -> str:
    key = (key or "").strip()
    if not key or len(key) > 200:
        raise BillingError(BillingErrorCode.INVALID_KEY, "An idempotency key of 1-200 characters is required.")
    return key


def _key_conflict(key: str, kind: str, delta: int) -> IdempotencyConflict:
    return IdempotencyConflict(
        BillingErrorCode.IDEMPOTENCY_CONFLICT,
        f"The key “{key}” was already used for a different operation ({kind} {delta:+d}); "
        "a key names one operation. Use a new key.",
    )


def _own_transaction():
    """The caller's transaction, or one of our own when there is none (a budget's second
    call and the alert's email need one)."""
    return contextlib.nullcontext() if connection.in_atomic_block else transaction.atomic()


def _call(function: str, params: list) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM public.{function}({', '.join(['%s'] * len(params))})", params)
        return cursor.fetchone()


def _built(model_class, columns: list[str], **values):
    """The row a function wrote, built from what was sent and what came back (no read-back)."""
    return model_class.from_db(connection.alias, None, [values[name] for name in columns])


def _count_on_commit(charges: list[tuple[str, str, int, int]]) -> None:
    """Tokens and credits on /metrics once the charges are durable (a rollback never paid)."""

    def count():
        for kind, model, tokens, credits in charges:
            metrics.credits_debited_observe(kind=pricing.ledger_kind(kind), model=model, tokens=tokens, credits=credits)

    transaction.on_commit(count)


def _alert(account_id: int, balance: int, due: bool) -> None:
    if due:
        low_balance_check(AccountBalance(account_id=account_id, balance=balance))


# --- grants ------------------------------------------------------------------------------


@transaction.atomic
def credits_grant(
    *,
    account: Account,
    amount: int,
    reason: str,
    key: str | None = None,
    actor=None,
    kind: str = Kind.GRANT,
    reference: str = "",
) -> CreditLedgerEntry:
    """Add credits. A grant needs a reason (kept in the entry's metadata) and is audited."""
    amount = _positive(amount, "The amount")
    if kind not in GRANT_KINDS:
        raise BillingError(CoreErrorCode.INVALID_KIND, f"{kind} is not a kind of grant.")
    reason = (reason or "").strip()
    if not reason:
        raise BillingError(
            BillingErrorCode.REASON_REQUIRED, "A grant needs a reason, e.g. “annual plan” or “support refund”."
        )
    key = _key(key or f"{kind}:{timezone.now().isoformat()}:{amount}")
    account_id = getattr(account, "pk", account)
    metadata = {"reason": reason}
    outcome, balance, entry_id, created_at, entry_kind, entry_delta = _call(
        "billing_grant", [account_id, key, kind, amount, reference, json.dumps(metadata), getattr(actor, "pk", None)]
    )
    if outcome == "existing":
        if entry_kind != kind or entry_delta != amount:
            raise _key_conflict(key, entry_kind, entry_delta)
        return CreditLedgerEntry.objects.for_account(account_id).get(pk=entry_id)
    audit_record(
        account=account,
        action="credits.grant",
        actor=actor or SYSTEM,
        target=f"{amount:,} credits",
        detail={"kind": kind, "reason": reason},
    )
    low_balance_rearm(AccountBalance(account_id=account_id, balance=balance))
    return _built(
        CreditLedgerEntry,
        _ENTRY_COLUMNS,
        id=entry_id,
        account_id=account_id,
        delta=amount,
        balance_after=balance,
        kind=kind,
        tokens=0,
        shortfall=0,
        model="",
        provider="",
        reference=reference,
        idempotency_key=key,
        created_by_id=getattr(actor, "pk", None),
        created_at=created_at,
        metadata=metadata,
        spent_by_user_id=None,
        spent_by_api_key_id=None,
    )


def starting_credits_grant(*, account, initial_credits: int, **_signal) -> None:
    """A new account's starting credits (receiver of accounts.signals.account_created)."""
    if initial_credits:
        credits_grant(
            account=account,
            amount=initial_credits,
            kind=Kind.SIGNUP,
            key="signup",
            reason="starting credits of a new account",
        )


@transaction.atomic
def credits_take_back(
    *, account: Account, amount: int, key: str, reason: str, reference: str = "", actor=None
) -> CreditLedgerEntry | None:
    """Take back up to `amount` credits that were granted (a refunded purchase): at most the
    balance, so the balance never goes below zero and nothing is refused for want of
    credits. Recorded as an adjustment of minus what was taken (None when the balance is
    zero), in the caller's transaction, and audited. Idempotent by `key`: the same key again
    returns the first entry and takes nothing more."""
    amount, key = _positive(amount, "The amount to take back"), _key(key)
    reason = (reason or "").strip()
    if not reason:
        raise BillingError(BillingErrorCode.REASON_REQUIRED, "Taking credits back needs a reason.")
    account_id = getattr(account, "pk", account)
    # The balance row lock first (the one order every operation takes), so the balance read
    # here is the one the debit below sees: min(amount, balance) never makes it negative.
    (balance,) = _call("billing_balance_lock", [account_id])
    existing = CreditLedgerEntry.objects.for_account(account_id).filter(idempotency_key=key).first()
    if existing is not None:
        if existing.kind != Kind.ADJUSTMENT or existing.delta > 0:
            raise _key_conflict(key, existing.kind, existing.delta)
        return existing
    taken = min(amount, balance)
    if taken == 0:
        return None
    metadata = {"reason": reason, "asked": amount}
    outcome, balance, alert_due, entry_id, created_at, *_ = _call(
        "billing_debit",
        [account_id, key, Kind.ADJUSTMENT, 0, taken, "", "", reference, json.dumps(metadata), None, None, None, True],
    )
    audit_record(
        account=account,
        action="credits.take_back",
        actor=actor or SYSTEM,
        target=f"{taken:,} credits",
        detail={"reason": reason, "asked": amount},
    )
    _alert(account_id, balance, alert_due)
    return _built(
        CreditLedgerEntry,
        _ENTRY_COLUMNS,
        id=entry_id,
        account_id=account_id,
        delta=-taken,
        balance_after=balance,
        kind=Kind.ADJUSTMENT,
        tokens=0,
        shortfall=0,
        model="",
        provider="",
        reference=reference,
        idempotency_key=key,
        created_by_id=None,
        created_at=created_at,
        metadata=metadata,
        spent_by_user_id=None,
        spent_by_api_key_id=None,
    )


# --- debits ------------------------------------------------------------------------------


def credits_debit(
    *,
    account: Account,
    tokens: int,
    key: str,
    kind: str,
    model: str = "",
    provider: str = "",
    reference: str = "",
    metadata: dict | None = None,
    user=None,
    api_key=None,
    hold: CreditHold | None = None,
) -> CreditLedgerEntry:
    """Charge one provider call: `tokens` as the provider reported them, priced by
    billing.pricing (`kind`: embedding, chat, or vision, which the ledger records as chat),
    all or nothing: InsufficientCredits, or BudgetExceeded for the spender (`user` or
    `api_key`, recorded on the entry), writes nothing. Durable once it returns and the
    caller's transaction commits (synchronous_commit stays on).

    With `hold` (an open hold that reserved these credits, e.g. a chat turn's, which covers
    the turn's query embedding), the charge is drawn from the hold: the hold shrinks by the
    credits and nothing is checked again, because the balance and the hold's spender's
    budgets already covered it when the hold was taken. So a turn is refused before it
    starts, never halfway. A closed hold, or one too small, is an ordinary debit."""
    tokens = _tokens(tokens)
    kind = _usage_kind(kind)
    credits = pricing.credits_for(kind=kind, model=model, tokens=tokens)
    kind, key, metadata = pricing.ledger_kind(kind), _key(key), metadata or {}
    account_id = getattr(account, "pk", account)
    spender = Spender.of(user=user, api_key=api_key)
    params = [
        account_id,
        key,
        kind,
        tokens,
        credits,
        model,
        provider,
        reference,
        json.dumps(metadata),
        spender.user_id,
        spender.api_key_id,
        getattr(hold, "pk", None),
    ]
    # No savepoint: the function writes all or nothing by itself, and the answers that refuse
    # (insufficient, conflict, budget) have written nothing.
    with _own_transaction():
        row = _call("billing_debit", [*params, False])
        if row[0] == "budgeted":
            # Under the row lock the first call took: budget_require's sums are exact.
            budget_require(account=account_id, spender=spender, needed=credits)
            row = _call("billing_debit", [*params, True])
        outcome, balance, alert_due, entry_id, created_at, entry_kind, entry_delta, entry_tokens, *spent_by = row
        if outcome == "existing":
            if entry_kind != kind or entry_tokens != tokens:
                raise _key_conflict(key, entry_kind, entry_delta)
            return CreditLedgerEntry.objects.for_account(account_id).get(pk=entry_id)
        if outcome == "insufficient":
            raise InsufficientCredits(needed=credits, balance=balance)
        if outcome == "drawn":
            hold.amount -= credits
        _alert(account_id, balance, alert_due)
        _count_on_commit([(kind, model, tokens, credits)])
    return _built(
        CreditLedgerEntry,
        _ENTRY_COLUMNS,
        id=entry_id,
        account_id=account_id,
        delta=-credits,
        balance_after=balance,
        kind=kind,
        tokens=tokens,
        shortfall=0,
        model=model,
        provider=provider,
        reference=reference,
        idempotency_key=key,
        created_by_id=None,
        created_at=created_at,
        metadata=metadata,
        spent_by_user_id=spent_by[0],
        spent_by_api_key_id=spent_by[1],
    )


# --- holds -------------------------------------------------------------------------------


def credits_hold(
    *, account: Account, amount: int, key: str, reference: str = "", user=None, api_key=None
) -> CreditHold:
    """Reserve `amount` credits (the worst case of a model call, priced by billing.pricing)
    before making the call. The spender (`user` or `api_key`) is recorded on the hold, and
    the hold is refused with BudgetExceeded when one of the spender's budgets cannot cover
    it, or InsufficientCredits. The same key again returns the same hold; with another
    amount it is refused.

    One statement (billing_hold) in the caller's transaction, two for a spender with a
    budget. A hold is short: it locks the account's balance row until the transaction
    commits, so take it last in a short transaction of its own. The hold's `budget_free` is
    True when the spender had no budget as it was taken (a chat turn then skips reading
    budgets for its `chat.done`)."""
    amount = _positive(amount, "The amount to hold")
    key = _key(key)
    spender = Spender.of(user=user, api_key=api_key)
    account_id = getattr(account, "pk", account)
    params = [account_id, key, amount, reference, spender.user_id, spender.api_key_id]
    with _own_transaction():
        outcome, balance, hold_id, held, created_at = _call("billing_hold", [*params, False])
        budget_free = outcome != "budgeted"
        if not budget_free:
            budget_require(account=account_id, spender=spender, needed=amount)
            outcome, balance, hold_id, held, created_at = _call("billing_hold", [*params, True])
    if outcome == "existing":
        if held != amount:
            raise IdempotencyConflict(
                BillingErrorCode.IDEMPOTENCY_CONFLICT,
                f"The hold “{key}” already exists for {held} credits; a key names one operation.",
            )
        return CreditHold.objects.for_account(account_id).get(pk=hold_id)
    if outcome == "insufficient":
        raise InsufficientCredits(needed=amount, balance=balance)
    hold = _built(
        CreditHold,
        _HOLD_COLUMNS,
        id=hold_id,
        account_id=account_id,
        key=key,
        amount=amount,
        status=HoldStatus.OPEN,
        reference=reference,
        used_tokens=None,
        created_at=created_at,
        closed_at=None,
        **spender.entry_fields(),
    )
    hold.budget_free = budget_free
    return hold


@dataclass(frozen=True)
class HoldDraw:
    """A charge made in a hold's name (a chat turn's query embedding or follow-up rewrite):
    `tokens` as the provider reported them, priced like credits_debit prices them, recorded
    when the hold is settled or released: the hold reserved it, so it is never refused, and
    the turn takes the balance row lock twice (hold, settle) instead of once more for each
    charge. Written as credits_debit(hold=…) writes it: a `:from-hold` release of its
    credits, then the charge, both spent by the hold's spender."""

    key: str
    kind: str
    tokens: int
    model: str = ""
    provider: str = ""
    reference: str = ""
    metadata: dict | None = None

    def as_json(self) -> dict:
        kind = _usage_kind(self.kind)
        return {
            "key": _key(self.key),
            "kind": pricing.ledger_kind(kind),
            "tokens": _tokens(self.tokens),
            "credits": pricing.credits_for(kind=kind, model=self.model, tokens=self.tokens),
            "model": self.model,
            "provider": self.provider,
            "reference": self.reference,
            "metadata": self.metadata or {},
        }


def _close(
    hold: CreditHold,
    *,
    status: str,
    used_tokens: int,
    draws,
    kind: str = pricing.CHAT,
    model: str = "",
    provider: str = "",
    reference: str = "",
    metadata: dict | None = None,
):
    """billing_hold_close, in the caller's transaction: (outcome, charge entry or None)."""
    kind = _usage_kind(kind)
    credits = pricing.credits_for(kind=kind, model=model, tokens=used_tokens) if used_tokens else 0
    draws = [draw.as_json() for draw in draws]
    kind, metadata = pricing.ledger_kind(kind), metadata or {}
    with _own_transaction():
        (
            outcome,
            balance,
            alert_due,
            status_now,
            amount,
            used,
            closed_at,
            entry_id,
            created_at,
            delta,
            shortfall,
            conflict_key,
            conflict_kind,
            conflict_delta,
        ) = _call(
            "billing_hold_close",
            [
                hold.account_id,
                hold.pk,
                status,
                used_tokens,
                credits,
                kind,
                model,
                provider,
                reference,
                json.dumps(metadata),
                json.dumps(draws),
            ],
        )
        if outcome == "draw_conflict":
            raise _key_conflict(conflict_key, conflict_kind, conflict_delta)
        if outcome == "missing":
            raise BillingError(
                BillingErrorCode.HOLD_MISSING, f"The hold “{hold.key}” is not in this account.", status=404
            )
        _alert(hold.account_id, balance, alert_due)
        if outcome == "done":
            charged = [(d["kind"], d["model"], d["tokens"], d["credits"]) for d in draws]
            if entry_id is not None:
                charged.append((kind, model, used_tokens, -delta))
            _count_on_commit(charged)
    if status_now is not None:
        hold.status, hold.amount, hold.used_tokens = status_now, amount, used
        hold.closed_at = closed_at or hold.closed_at
    entry = None
    if entry_id is not None:
        entry = _built(
            CreditLedgerEntry,
            _ENTRY_COLUMNS,
            id=entry_id,
            account_id=hold.account_id,
            delta=delta,
            balance_after=balance,
            kind=kind,
            tokens=used_tokens,
            shortfall=shortfall,
            model=model,
            provider=provider,
            reference=reference or hold.reference,
            idempotency_key=f"{hold.key}:charge",
            created_by_id=None,
            created_at=created_at,
            metadata=metadata,
            spent_by_user_id=hold.spent_by_user_id,
            spent_by_api_key_id=hold.spent_by_api_key_id,
        )
    return outcome, entry


def hold_settle(
    *,
    hold: CreditHold,
    used_tokens: int,
    kind: str = Kind.CHAT,
    model: str = "",
    provider: str = "",
    reference: str = "",
    metadata: dict | None = None,
    draws: tuple[HoldDraw, ...] = (),
) -> CreditLedgerEntry | None:
    """Charge exactly what was used (`used_tokens` as the provider reported them, priced by
    billing.pricing) and release the rest, after recording `draws`, the charges made in the
    hold's name.

    If more was used than the balance allows, charge what it allows and record the
    shortfall on the entry; a settle is never refused by a budget (the call was made).
    Returns the charge entry (None when nothing was used); its balance_after is the balance
    once settled. Settling twice returns the first result; a released hold cannot be
    settled. One statement (billing_hold_close), in the caller's transaction."""
    used_tokens = _tokens(used_tokens, "Used tokens")
    outcome, entry = _close(
        hold,
        status=HoldStatus.SETTLED,
        used_tokens=used_tokens,
        draws=tuple(draws),
        kind=kind,
        model=model,
        provider=provider,
        reference=reference,
        metadata=metadata,
    )
    if outcome == "closed":
        raise BillingError(
            BillingErrorCode.HOLD_CLOSED, f"The hold “{hold.key}” was already released and cannot be settled."
        )
    if outcome == "existing":
        if hold.used_tokens != used_tokens:
            raise IdempotencyConflict(
                BillingErrorCode.IDEMPOTENCY_CONFLICT,
                f"The hold “{hold.key}” was already settled for {hold.used_tokens} tokens.",
            )
        return (
            CreditLedgerEntry.objects.for_account(hold.account_id).filter(idempotency_key=f"{hold.key}:charge").first()
        )
    return entry


def hold_release(*, hold: CreditHold, draws: tuple[HoldDraw, ...] = ()) -> CreditHold:
    """Give back everything held (the call never happened), after recording `draws` (what
    was spent in the hold's name before it failed). Idempotent."""
    _close(hold, status=HoldStatus.RELEASED, used_tokens=0, draws=tuple(draws))
    return hold
