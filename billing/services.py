"""Writes to the credit ledger. The only code that creates ledger entries.

Every operation is idempotent by its key (unique per account): the same call twice changes
nothing the second time and returns the same result; the same key with a different amount
is refused, because a key names one operation. Spenders of one account are serialised on
its balance row (SELECT … FOR UPDATE), and a CHECK keeps the balance at or above zero.

An ordinary debit (the hot path: every chat turn, search and ingestion) is one statement,
the SQL function billing_debit (billing/migrations/0006), run as the app's role under RLS;
holds, settles, grants and debits drawn from a hold go through the ORM.
"""
from __future__ import annotations

import contextlib
import json

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from accounts.models import Account, ApiKey, Membership
from accounts.permissions import Action, principal_require
from audit.actors import SYSTEM
from audit.services import audit_record
from billing.alerts import low_balance_check, low_balance_rearm
from billing.errors import BillingError, IdempotencyConflict, InsufficientCredits
from billing.models import AccountBalance, Budget, BudgetPeriod, CreditHold, CreditLedgerEntry, HoldStatus, Kind
from billing.selectors import Spender, budget_get, budget_require

SPEND_KINDS = {Kind.EMBEDDING, Kind.CHAT}
GRANT_KINDS = {Kind.GRANT, Kind.SIGNUP, Kind.REFUND, Kind.ADJUSTMENT}
MIN_CREDITS_PER_CALL = 1  # a provider call that reports 0 tokens still costs one credit


def _lock_balance(account: Account) -> AccountBalance:
    balances = AccountBalance.objects.for_account(account)
    balance = balances.select_for_update().first()
    if balance is None:
        # NOTE: two first operations on a new account may race here; ON CONFLICT DO NOTHING
        # lets both through, and the row lock below still serialises them.
        balances.bulk_create([AccountBalance(account_id=getattr(account, "pk", account))], ignore_conflicts=True)
        balance = balances.select_for_update().get()
    return balance


def _positive(amount, what: str) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise BillingError("invalid_amount", f"{what} must be a whole number greater than zero (got {amount!r}).")
    return amount


def _key(key: str) -> str:
    key = (key or "").strip()
    if not key or len(key) > 200:
        raise BillingError("invalid_key", "An idempotency key of 1-200 characters is required.")
    return key


def _existing(account: Account, key: str, *, kind: str, delta: int | None = None,
              tokens: int | None = None) -> CreditLedgerEntry | None:
    entry = CreditLedgerEntry.objects.for_account(account).filter(idempotency_key=key).first()
    if entry is None:
        return None
    same = entry.kind == kind and (delta is None or entry.delta == delta) and (tokens is None or entry.tokens == tokens)
    if not same:
        raise _key_conflict(key, entry.kind, entry.delta)
    return entry


def _append(balance: AccountBalance, *, kind: str, delta: int, key: str, **fields) -> CreditLedgerEntry:
    balance.balance += delta
    entry = CreditLedgerEntry.objects.for_account(balance.account_id).create(
        account_id=balance.account_id, kind=kind, delta=delta, balance_after=balance.balance,
        idempotency_key=key, **fields)
    balance.save(update_fields=["balance", "updated_at"])
    return entry


@transaction.atomic
def credits_grant(*, account: Account, amount: int, reason: str, key: str | None = None, actor=None,
                  kind: str = Kind.GRANT, reference: str = "") -> CreditLedgerEntry:
    """Add credits. A grant needs a reason (kept in the entry's metadata)."""
    amount = _positive(amount, "The amount")
    if kind not in GRANT_KINDS:
        raise BillingError("invalid_kind", f"{kind} is not a kind of grant.")
    reason = (reason or "").strip()
    if not reason:
        raise BillingError("reason_required", "A grant needs a reason, e.g. “annual plan” or “support refund”.")
    key = _key(key or f"{kind}:{timezone.now().isoformat()}:{amount}")
    balance = _lock_balance(account)
    existing = _existing(account, key, kind=kind, delta=amount)
    if existing:
        return existing
    audit_record(account=account, action="credits.grant", actor=actor or SYSTEM, target=f"{amount:,} credits", detail={"kind": kind, "reason": reason})
    entry = _append(balance, kind=kind, delta=amount, key=key, reference=reference,
                    created_by=actor, metadata={"reason": reason})
    low_balance_rearm(balance)
    return entry


def credits_debit(*, account: Account, tokens: int, key: str, kind: str, model: str = "", provider: str = "",
                  reference: str = "", metadata: dict | None = None, user=None, api_key=None,
                  hold: CreditHold | None = None) -> CreditLedgerEntry:
    """Charge provider-reported tokens 1:1 (at least MIN_CREDITS_PER_CALL per call), all or
    nothing: InsufficientCredits, or BudgetExceeded for the spender (`user` or `api_key`,
    recorded on the entry), writes nothing. Durable once it returns and the caller's
    transaction commits (synchronous_commit stays on).

    With `hold` (an open hold that reserved these credits, e.g. a chat turn's, which covers
    the turn's query embedding), the charge is drawn from the hold: the hold shrinks by
    `tokens` and nothing is checked again, because the balance and the hold's spender's
    budgets already covered it when the hold was taken. So a turn is refused before it
    starts, never halfway. A closed hold, or one too small, is an ordinary debit."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise BillingError("invalid_amount", f"Tokens must be a whole number, zero or more (got {tokens!r}).")
    tokens = max(tokens, MIN_CREDITS_PER_CALL)
    if kind not in SPEND_KINDS:
        raise BillingError("invalid_kind", f"{kind} is not a kind of spending.")
    key = _key(key)
    fields = dict(kind=kind, key=key, tokens=tokens, model=model, provider=provider, reference=reference,
                  metadata=metadata or {})
    if hold is not None:
        return _debit_with_hold(account, hold, spender=Spender.of(user=user, api_key=api_key), **fields)
    return _debit(account, spender=Spender.of(user=user, api_key=api_key), **fields)


# One round trip: lock, key check, balance check, insert, update (billing/migrations/0006).
_DEBIT_SQL = "SELECT * FROM public.billing_debit(%s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s)"


def _debit(account, *, spender: Spender, kind: str, key: str, tokens: int, model: str, provider: str,
           reference: str, metadata: dict) -> CreditLedgerEntry:
    """An ordinary debit in one statement (billing_debit), in the caller's transaction: no
    savepoint, because the statement writes all or nothing by itself, and the answers that
    refuse (insufficient, conflict, budget) have written nothing. A transaction of its own
    only when the caller has none (the budget's second call and the alert's email need one)."""
    account_id = getattr(account, "pk", account)
    params = [account_id, key, kind, tokens, model, provider, reference, json.dumps(metadata),
              spender.user_id, spender.api_key_id]
    with contextlib.nullcontext() if connection.in_atomic_block else transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_DEBIT_SQL, [*params, False])
            row = cursor.fetchone()
            if row[0] == "budgeted":
                # Under the row lock the first call took: budget_require's sums are exact.
                _budgets_check(account, spender, tokens)
                cursor.execute(_DEBIT_SQL, [*params, True])
                row = cursor.fetchone()
        outcome, balance, alert_due, entry_id, created_at, entry_kind, entry_delta, entry_tokens = row
        if outcome == "existing":
            if entry_kind != kind or entry_tokens != tokens:
                raise _key_conflict(key, entry_kind, entry_delta)
            return CreditLedgerEntry.objects.for_account(account_id).get(pk=entry_id)
        if outcome == "insufficient":
            raise InsufficientCredits(needed=tokens, balance=balance)
        if alert_due:
            low_balance_check(AccountBalance(account_id=account_id, balance=balance))
    entry = CreditLedgerEntry(id=entry_id, account_id=account_id, delta=-tokens, balance_after=balance, kind=kind,
                              tokens=tokens, model=model, provider=provider, reference=reference,
                              idempotency_key=key, created_at=created_at, metadata=metadata,
                              **spender.entry_fields())
    entry._state.adding, entry._state.db = False, connection.alias
    return entry


def _key_conflict(key: str, kind: str, delta: int) -> IdempotencyConflict:
    return IdempotencyConflict(
        "idempotency_conflict",
        f"The key “{key}” was already used for a different operation ({kind} {delta:+d}); "
        "a key names one operation. Use a new key."
    )


@transaction.atomic
def _debit_with_hold(account, hold: CreditHold, *, spender: Spender, **fields) -> CreditLedgerEntry:
    """A debit drawn from an open hold (a chat turn's rewrite and query embedding), or an
    ordinary debit when the hold cannot cover it, through the ORM."""
    tokens, key, kind = fields["tokens"], fields["key"], fields["kind"]
    balance = _lock_balance(account)
    existing = _existing(account, key, kind=kind, tokens=tokens)
    if existing:
        return existing
    drawn_from = _hold_draw(balance, hold, tokens=tokens, key=key)
    if drawn_from is not None:
        # Drawn from a hold: the balance does not move, so no low-balance check either.
        return _append(balance, delta=-tokens, **fields, **_hold_spender(drawn_from))
    if balance.balance < tokens:
        raise InsufficientCredits(needed=tokens, balance=balance.balance)
    _budgets_check(account, spender, tokens)
    entry = _append(balance, delta=-tokens, **fields, **spender.entry_fields())
    low_balance_check(balance)
    return entry


def _hold_draw(balance: AccountBalance, hold: CreditHold, *, tokens: int, key: str) -> CreditHold | None:
    """Release `tokens` of an open hold for a charge made in its name (called under the balance
    row lock): the balance and every budget's spend stay as they were (the open hold counts
    `tokens` less, the charge `tokens` more). None when the hold is closed or cannot spare
    them (a hold keeps at least one credit until it is settled)."""
    if hold.account_id != balance.account_id:
        return None
    hold = _lock_hold(hold)
    if hold.status != HoldStatus.OPEN or hold.amount <= tokens:
        return None
    _append(balance, kind=Kind.HOLD_RELEASE, delta=tokens, key=f"{key}:from-hold", reference=hold.reference,
            **_hold_spender(hold))
    # NOTE: the hold's amount is what is still reserved; credits_hold's retry check compares a
    # retried hold's amount with it, and a turn's hold is never retried with its key.
    hold.amount -= tokens
    hold.save(update_fields=["amount"])
    return hold


@transaction.atomic
def credits_hold(*, account: Account, amount: int, key: str, reference: str = "", user=None,
                 api_key=None) -> CreditHold:
    """Reserve `amount` credits (the worst case of a model call) before making the call.
    The spender (`user` or `api_key`) is recorded on the hold, and the hold is refused with
    BudgetExceeded when one of the spender's budgets cannot cover it."""
    amount = _positive(amount, "The amount to hold")
    key = _key(key)
    balance = _lock_balance(account)
    hold = CreditHold.objects.for_account(account).filter(key=key).first()
    if hold is not None:
        if hold.amount != amount:
            raise IdempotencyConflict("idempotency_conflict", f"The hold “{key}” already exists for {hold.amount} credits; "
                                      "a key names one operation.")
        return hold
    if balance.balance < amount:
        raise InsufficientCredits(needed=amount, balance=balance.balance)
    spender = Spender.of(user=user, api_key=api_key)
    _budgets_check(account, spender, amount)
    _append(balance, kind=Kind.HOLD, delta=-amount, key=key, reference=reference, **spender.entry_fields())
    return CreditHold.objects.for_account(account).create(
        account=account, key=key, amount=amount, reference=reference, **spender.entry_fields())


def _budgets_check(account, spender: Spender, amount: int) -> None:
    """Refuse what a budget of the spender cannot cover. Called after _lock_balance: every
    hold, debit and settle of the account holds that row lock until its transaction ends,
    and under READ COMMITTED the spend sum (a new statement) sees everything they committed,
    so concurrent spenders are checked one after another against exact sums."""
    if spender:
        budget_require(account=account, spender=spender, needed=amount)


def _hold_spender(hold: CreditHold) -> dict:
    return {"spent_by_user_id": hold.spent_by_user_id, "spent_by_api_key_id": hold.spent_by_api_key_id}


def _lock_hold(hold: CreditHold) -> CreditHold:
    return CreditHold.objects.for_account(hold.account_id).select_for_update().get(pk=hold.pk)


@transaction.atomic
def hold_settle(*, hold: CreditHold, used_tokens: int, kind: str = Kind.CHAT, model: str = "", provider: str = "",
                reference: str = "", metadata: dict | None = None) -> CreditLedgerEntry | None:
    """Charge exactly what was used and release the rest.

    If more was used than held, charge what the balance allows and record the shortfall on
    the entry. Returns the charge entry (None when nothing was used). Settling twice returns
    the first result; a released hold cannot be settled.
    """
    if isinstance(used_tokens, bool) or not isinstance(used_tokens, int) or used_tokens < 0:
        raise BillingError("invalid_amount", f"Used tokens must be a whole number, zero or more (got {used_tokens!r}).")
    if kind not in SPEND_KINDS:
        raise BillingError("invalid_kind", f"{kind} is not a kind of spending.")
    balance = _lock_balance(hold.account)
    hold = _lock_hold(hold)
    charge_key = f"{hold.key}:charge"
    if hold.status == HoldStatus.SETTLED:
        if hold.used_tokens != used_tokens:
            raise IdempotencyConflict("idempotency_conflict", f"The hold “{hold.key}” was already settled for {hold.used_tokens} tokens.")
        return CreditLedgerEntry.objects.for_account(hold.account_id).filter(idempotency_key=charge_key).first()
    if hold.status == HoldStatus.RELEASED:
        raise BillingError("hold_closed", f"The hold “{hold.key}” was already released and cannot be settled.")
    # NOTE: settling is never refused by a budget: the call was made. Usage above the hold
    # (rare: the hold is the worst case) may pass the cap; the spender's next hold is refused.
    _append(balance, kind=Kind.HOLD_RELEASE, delta=hold.amount, key=f"{hold.key}:release", reference=hold.reference,
            **_hold_spender(hold))
    entry = None
    if used_tokens:
        charged = min(used_tokens, balance.balance)
        entry = _append(balance, kind=kind, delta=-charged, key=charge_key, tokens=used_tokens,
                        shortfall=used_tokens - charged, model=model, provider=provider,
                        reference=reference or hold.reference, metadata=metadata or {}, **_hold_spender(hold))
    _close(hold, HoldStatus.SETTLED, used_tokens)
    low_balance_check(balance)
    return entry


@transaction.atomic
def hold_release(*, hold: CreditHold) -> CreditHold:
    """Give back everything held (the call never happened). Idempotent."""
    balance = _lock_balance(hold.account)
    hold = _lock_hold(hold)
    if hold.status == HoldStatus.OPEN:
        _append(balance, kind=Kind.HOLD_RELEASE, delta=hold.amount, key=f"{hold.key}:release",
                reference=hold.reference, **_hold_spender(hold))
        _close(hold, HoldStatus.RELEASED, 0)
    return hold


def _close(hold: CreditHold, status: str, used_tokens: int) -> None:
    hold.status = status
    hold.used_tokens = used_tokens
    hold.closed_at = timezone.now()
    hold.save(update_fields=["status", "used_tokens", "closed_at"])


def starting_credits_grant(*, account, initial_credits: int, **_signal) -> None:
    """A new account's starting credits (receiver of accounts.signals.account_created)."""
    if initial_credits:
        credits_grant(account=account, amount=initial_credits, kind=Kind.SIGNUP, key="signup",
                      reason="starting credits of a new account")


# --- budgets ------------------------------------------------------------------------------

MAX_BUDGET = 10**12


def _budget_manager_require(account, actor) -> None:
    """Owners and admins set budgets; an API key never does (accounts.permissions)."""
    principal = actor
    if not isinstance(actor, ApiKey):
        principal = Membership.objects.for_account(account).filter(user_id=getattr(actor, "pk", None)).first()
    principal_require(principal, Action.BUDGETS_MANAGE)


def _budget_target(account, *, user_id=None, api_key_id=None) -> tuple[dict, str]:
    """The budget's target in this account as Budget fields, and how to name it. Another
    account's member or key answers like a missing one (404)."""
    if bool(user_id) == bool(api_key_id):
        raise BillingError("invalid_target", "Choose one member or one API key for the budget.", field="target")
    try:
        if not 0 < int(user_id or api_key_id) < 2**63:
            raise ValueError
        if user_id:
            member = (Membership.objects.for_account(account).select_related("user")
                      .filter(user_id=int(user_id)).first())
            if member is None:
                raise BillingError("not_found", "That member is not in this account.", status=404, field="target")
            return {"user": member.user, "api_key": None}, member.user.email
        key = ApiKey.objects.for_account(account).filter(pk=int(api_key_id)).first()
    except (TypeError, ValueError, OverflowError):
        raise BillingError("invalid_target", "Choose one member or one API key for the budget.", field="target")
    if key is None:
        raise BillingError("not_found", "That API key is not in this account.", status=404, field="target")
    if not key.is_active:
        raise BillingError("invalid_target", f"The API key {key} is revoked; it spends nothing.", field="target")
    return {"user": None, "api_key": key}, f"API key {key}"


def budget_limit_parse(value) -> int:
    """A whole number of credits from 1 to 1,000,000,000,000; "5,000" and "5 000" are read
    as 5000."""
    text = str(value).replace(",", "").replace("_", "").replace(" ", "").replace("\u202f", "").strip()
    if isinstance(value, bool) or not text.isdigit() or not 0 < int(text) <= MAX_BUDGET:
        raise BillingError("invalid_amount", f"The limit must be a whole number of credits from 1 to "
                                             f"{MAX_BUDGET:,} (got {str(value)[:40]!r}).", field="limit")
    return int(text)


@transaction.atomic
def budget_set(*, account, actor, period: str, limit, user_id=None, api_key_id=None) -> Budget:
    """Cap what one member (`user_id`) or one API key (`api_key_id`) may spend per UTC day or
    month; setting it again for the same target and period changes the limit. Owners and
    admins only. Takes effect with the next hold or debit."""
    _budget_manager_require(account, actor)
    if period not in BudgetPeriod.values:
        raise BillingError("invalid_period", "The period must be “day” or “month”.", field="period")
    limit = budget_limit_parse(limit)
    target, name = _budget_target(account, user_id=user_id, api_key_id=api_key_id)
    budgets = Budget.objects.for_account(account)
    existing = budgets.select_for_update().filter(period=period, **target).first()
    previous = existing.limit if existing else None
    if existing is None:
        try:
            with transaction.atomic():
                existing = budgets.create(account=account, period=period, limit=limit,
                                          created_by=actor if isinstance(actor, get_user_model()) else None, **target)
        except IntegrityError:  # NOTE: set twice at once: the unique constraint keeps one; update it
            existing = budgets.select_for_update().get(period=period, **target)
    if existing.limit != limit:
        existing.limit = limit
        existing.save(update_fields=["limit", "updated_at"])
    audit_record(account=account, action="budget.set", actor=actor,
                 target=f"{BudgetPeriod(period).label.lower()} budget of {name}",
                 detail={"period": period, "limit": limit, "previous": previous})
    return existing


@transaction.atomic
def budget_remove(*, account, actor, budget_id) -> None:
    """Remove a budget (owners and admins). Another account's budget answers 404."""
    _budget_manager_require(account, actor)
    budget = budget_get(account=account, budget_id=budget_id)
    if budget is None:
        raise BillingError("not_found", "That budget does not exist.", status=404)
    name = budget.user.email if budget.user_id else f"API key {budget.api_key}"
    audit_record(account=account, action="budget.remove", actor=actor,
                 target=f"{budget.get_period_display().lower()} budget of {name}",
                 detail={"period": budget.period, "limit": budget.limit})
    Budget.objects.for_account(account).filter(pk=budget.pk).delete()
