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
from dataclasses import dataclass

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
    # The row it wrote, built from what was sent and what came back (no read-back query).
    written = dict(id=entry_id, account_id=account_id, delta=-tokens, balance_after=balance, kind=kind, tokens=tokens,
                   shortfall=0, model=model, provider=provider, reference=reference, idempotency_key=key,
                   created_by_id=None, created_at=created_at, metadata=metadata, **spender.entry_fields())
    return CreditLedgerEntry.from_db(connection.alias, None, [written[name] for name in _ENTRY_COLUMNS])


_ENTRY_COLUMNS = [field.attname for field in CreditLedgerEntry._meta.concrete_fields]


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


# One statement (the common case: a spender without budgets, a new key, enough credits):
# the UPDATE takes the balance row lock and re-checks the balance on the row as it is once
# the lock is granted (READ COMMITTED re-evaluates its WHERE on the latest version), and the
# hold and its ledger entry are inserted only from the row it updated. So it writes all or
# nothing, and when it writes nothing the ORM path below decides (and raises) as before, in
# the same transaction, with nothing to undo. The key and budget checks read the statement's
# snapshot: a same-key hold committed while this one waited for the lock is still refused
# by the unique index (an IntegrityError, never a second hold), and a budget created in that
# moment is missed exactly as it was when read after the lock (budget_set takes no lock).
_HOLD_SQL = """
WITH b AS (
    UPDATE billing_accountbalance AS b SET balance = b.balance - %(amount)s, updated_at = clock_timestamp()
     WHERE b.account_id = %(account_id)s AND b.balance >= %(amount)s
       AND NOT EXISTS (SELECT 1 FROM billing_credithold AS h WHERE h.account_id = %(account_id)s AND h.key = %(key)s)
       AND NOT EXISTS (SELECT 1 FROM billing_budget AS g WHERE g.account_id = %(account_id)s
                          AND CASE WHEN %(api_key_id)s::bigint IS NOT NULL THEN g.api_key_id = %(api_key_id)s::bigint
                                   WHEN %(user_id)s::bigint IS NOT NULL
                                   THEN g.user_id = %(user_id)s::bigint AND g.api_key_id IS NULL
                                   ELSE false END)
    RETURNING b.balance, b.updated_at),
h AS (
    INSERT INTO billing_credithold (account_id, key, amount, status, reference, used_tokens, created_at, closed_at,
                                    spent_by_user_id, spent_by_api_key_id)
    SELECT %(account_id)s, %(key)s, %(amount)s, 'open', %(reference)s, NULL, b.updated_at, NULL, %(user_id)s,
           %(api_key_id)s FROM b
    RETURNING id, created_at),
e AS (
    INSERT INTO billing_creditledgerentry (account_id, delta, balance_after, kind, tokens, shortfall, model, provider,
                                           reference, idempotency_key, created_by_id, created_at, metadata,
                                           spent_by_user_id, spent_by_api_key_id)
    SELECT %(account_id)s, -%(amount)s, b.balance, 'hold', 0, 0, '', '', %(reference)s, %(key)s, NULL, b.updated_at,
           '{}'::jsonb, %(user_id)s, %(api_key_id)s FROM b
    RETURNING id)
SELECT h.id, h.created_at FROM h, e
"""


def credits_hold(*, account: Account, amount: int, key: str, reference: str = "", user=None,
                 api_key=None) -> CreditHold:
    """Reserve `amount` credits (the worst case of a model call) before making the call.
    The spender (`user` or `api_key`) is recorded on the hold, and the hold is refused with
    BudgetExceeded when one of the spender's budgets cannot cover it.

    Usually one statement (_HOLD_SQL) in the caller's transaction, without a savepoint:
    it writes all or nothing. A hold is short: it locks the account's balance row until the
    transaction commits, so take it last in a short transaction of its own. The hold's
    `budget_free` is True when the spender had no budget as it was taken (a chat turn then
    skips reading budgets for its `chat.done`)."""
    amount = _positive(amount, "The amount to hold")
    key = _key(key)
    spender = Spender.of(user=user, api_key=api_key)
    account_id = getattr(account, "pk", account)
    with contextlib.nullcontext() if connection.in_atomic_block else transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_HOLD_SQL, {"account_id": account_id, "amount": amount, "key": key,
                                       "reference": reference, "user_id": spender.user_id,
                                       "api_key_id": spender.api_key_id})
            row = cursor.fetchone()
        if row is None:  # budgets to check, a key already used, too few credits or no balance row yet
            return _hold_orm(account, amount=amount, key=key, reference=reference, spender=spender)
    hold = CreditHold(id=row[0], account_id=account_id, key=key, amount=amount, status=HoldStatus.OPEN,
                      reference=reference, used_tokens=None, created_at=row[1], closed_at=None,
                      **spender.entry_fields())
    hold._state.adding, hold._state.db = False, connection.alias
    hold.budget_free = True
    return hold


@transaction.atomic
def _hold_orm(account, *, amount: int, key: str, reference: str, spender: Spender) -> CreditHold:
    balance = _lock_balance(account)
    hold = CreditHold.objects.for_account(account).filter(key=key).first()
    if hold is not None:
        if hold.amount != amount:
            raise IdempotencyConflict("idempotency_conflict", f"The hold “{key}” already exists for {hold.amount} credits; "
                                      "a key names one operation.")
        return hold
    if balance.balance < amount:
        raise InsufficientCredits(needed=amount, balance=balance.balance)
    _budgets_check(account, spender, amount)
    _append(balance, kind=Kind.HOLD, delta=-amount, key=key, reference=reference, **spender.entry_fields())
    return CreditHold.objects.for_account(account).create(
        account_id=getattr(account, "pk", account), key=key, amount=amount, reference=reference,
        **spender.entry_fields())


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


@dataclass(frozen=True)
class HoldDraw:
    """A charge made in a hold's name (a chat turn's query embedding or follow-up rewrite),
    recorded when the hold is settled or released: the hold reserved it, so it is never
    refused, and the turn takes the balance row lock twice (hold, settle) instead of once
    more for each charge. Written as credits_debit(hold=…) writes it: a `:from-hold` release
    of the tokens, then the charge, both spent by the hold's spender."""
    key: str
    kind: str
    tokens: int
    model: str = ""
    provider: str = ""
    reference: str = ""
    metadata: dict | None = None


# Settle (or release) in one statement: lock the balance row first (the order every spender
# takes: balance, then hold), close the hold if it is still open and can cover its draws
# (`h`), move the balance (`b`; RETURNING old/new is PostgreSQL 18's) and append the entries
# in order (`e`): each draw's release and charge, the release of the rest, the charge. When
# the hold is not open (settled twice, released, swept) or its draws do not fit, `h` and
# everything after it write nothing and the ORM path answers as before.
_CLOSE_SQL = """
WITH lb AS (SELECT b.id FROM billing_accountbalance AS b WHERE b.account_id = %(account_id)s FOR UPDATE),
h AS (
    UPDATE billing_credithold AS h
       SET status = %(status)s, used_tokens = %(used)s, closed_at = clock_timestamp(), amount = h.amount - %(drawn)s
     WHERE h.id = %(hold_id)s AND h.account_id = %(account_id)s AND h.status = 'open' AND h.amount > %(drawn)s
       AND EXISTS (SELECT 1 FROM lb)
    RETURNING h.amount AS rest, h.key AS hold_key, h.reference AS hold_reference, h.spent_by_user_id,
              h.spent_by_api_key_id),
b AS (
    UPDATE billing_accountbalance AS b
       SET balance = b.balance + h.rest - LEAST(%(used)s::bigint, b.balance + h.rest), updated_at = clock_timestamp()
      FROM h WHERE b.account_id = %(account_id)s
    RETURNING old.balance AS before, new.balance AS after, h.rest, h.hold_key, h.hold_reference, h.spent_by_user_id,
              h.spent_by_api_key_id),
e AS (
    INSERT INTO billing_creditledgerentry (account_id, delta, balance_after, kind, tokens, shortfall, model, provider,
                                           reference, idempotency_key, created_by_id, created_at, metadata,
                                           spent_by_user_id, spent_by_api_key_id)
    SELECT %(account_id)s, v.delta, v.balance_after, v.kind, v.tokens, v.shortfall, v.model, v.provider, v.reference,
           v.idempotency_key, NULL, clock_timestamp(), v.metadata, b.spent_by_user_id, b.spent_by_api_key_id
      FROM b CROSS JOIN LATERAL (VALUES {rows}) AS v(ord, delta, balance_after, kind, tokens, shortfall, model,
                                                     provider, reference, idempotency_key, metadata)
     ORDER BY v.ord
    RETURNING id, idempotency_key, delta, balance_after, tokens, shortfall, created_at)
SELECT b.after, e.id, e.created_at, e.delta, e.shortfall,
       EXISTS (SELECT 1 FROM billing_billingsettings AS s
                WHERE s.account_id = %(account_id)s AND s.alert_armed AND s.low_balance_threshold > b.after
                  AND s.contact_email <> '')
  FROM b LEFT JOIN e ON e.idempotency_key = b.hold_key || ':charge'
"""
_DRAW_ROWS = (
    "({n}, %(t{i})s::bigint, b.before + %(t{i})s::bigint, 'hold_release'::text, 0::bigint, 0::bigint, ''::text,"
    " ''::text, b.hold_reference, %(k{i})s::text || ':from-hold', '{{}}'::jsonb),"
    " ({n1}, -%(t{i})s::bigint, b.before, %(kind{i})s::text, %(t{i})s::bigint, 0::bigint, %(m{i})s::text,"
    " %(p{i})s::text, %(r{i})s::text, %(k{i})s::text, %(md{i})s::jsonb)")
_REST_ROW = ("(1000000, b.rest, b.before + b.rest, 'hold_release'::text, 0::bigint, 0::bigint, ''::text, ''::text,"
             " b.hold_reference, b.hold_key || ':release', '{}'::jsonb)")
_CHARGE_ROW = ("(1000001, b.after - b.before - b.rest, b.after, %(kind)s::text, %(used)s::bigint,"
               " %(used)s::bigint - (b.before + b.rest - b.after), %(model)s::text, %(provider)s::text,"
               " %(reference)s::text, b.hold_key || ':charge', %(metadata)s::jsonb)")


def _close_in_one_statement(hold: CreditHold, *, status: str, used_tokens: int, draws: tuple[HoldDraw, ...],
                            kind: str = Kind.CHAT, model: str = "", provider: str = "", reference: str = "",
                            metadata: dict | None = None) -> tuple | None:
    """(balance after, charge entry or None), or None when the hold was not closed here."""
    params = {"account_id": hold.account_id, "hold_id": hold.pk, "status": status, "used": used_tokens,
              "drawn": sum(d.tokens for d in draws), "kind": kind, "model": model, "provider": provider,
              "reference": reference or hold.reference, "metadata": json.dumps(metadata or {})}
    rows = []
    for i, draw in enumerate(draws):
        rows.append(_DRAW_ROWS.format(i=i, n=2 * i, n1=2 * i + 1))
        params.update({f"t{i}": draw.tokens, f"k{i}": draw.key, f"kind{i}": draw.kind, f"m{i}": draw.model,
                       f"p{i}": draw.provider, f"r{i}": draw.reference, f"md{i}": json.dumps(draw.metadata or {})})
    rows.append(_REST_ROW)
    if used_tokens:
        rows.append(_CHARGE_ROW)
    with connection.cursor() as cursor:
        cursor.execute(_CLOSE_SQL.format(rows=", ".join(rows)), params)
        row = cursor.fetchone()
    if row is None:
        return None
    balance, entry_id, created_at, delta, shortfall, alert_due = row
    hold.status, hold.used_tokens, hold.closed_at = status, used_tokens, timezone.now()
    hold.amount -= params["drawn"]
    if alert_due:
        low_balance_check(AccountBalance(account_id=hold.account_id, balance=balance))
    entry = None
    if entry_id is not None:
        entry = CreditLedgerEntry(id=entry_id, account_id=hold.account_id, delta=delta, balance_after=balance,
                                  kind=kind, tokens=used_tokens, shortfall=shortfall, model=model, provider=provider,
                                  reference=params["reference"], idempotency_key=f"{hold.key}:charge",
                                  created_at=created_at, metadata=metadata or {}, **_hold_spender(hold))
        entry._state.adding, entry._state.db = False, connection.alias
    return balance, entry


def _draws_orm(hold: CreditHold, draws: tuple[HoldDraw, ...]) -> None:
    for draw in draws:
        credits_debit(account=hold.account_id, tokens=draw.tokens, key=draw.key, kind=draw.kind, model=draw.model,
                      provider=draw.provider, reference=draw.reference, metadata=draw.metadata,
                      user=hold.spent_by_user_id, api_key=hold.spent_by_api_key_id, hold=hold)


def hold_settle(*, hold: CreditHold, used_tokens: int, kind: str = Kind.CHAT, model: str = "", provider: str = "",
                reference: str = "", metadata: dict | None = None,
                draws: tuple[HoldDraw, ...] = ()) -> CreditLedgerEntry | None:
    """Charge exactly what was used and release the rest (and first record `draws`, the
    charges made in the hold's name).

    If more was used than held, charge what the balance allows and record the shortfall on
    the entry. Returns the charge entry (None when nothing was used); its balance_after is
    the balance once settled. Settling twice returns the first result; a released hold
    cannot be settled. Usually one statement (_CLOSE_SQL), in the caller's transaction.
    """
    if isinstance(used_tokens, bool) or not isinstance(used_tokens, int) or used_tokens < 0:
        raise BillingError("invalid_amount", f"Used tokens must be a whole number, zero or more (got {used_tokens!r}).")
    if kind not in SPEND_KINDS:
        raise BillingError("invalid_kind", f"{kind} is not a kind of spending.")
    draws = tuple(draws)
    with contextlib.nullcontext() if connection.in_atomic_block else transaction.atomic():
        closed = _close_in_one_statement(hold, status=HoldStatus.SETTLED, used_tokens=used_tokens, draws=draws,
                                         kind=kind, model=model, provider=provider, reference=reference,
                                         metadata=metadata)
        if closed is not None:
            return closed[1]
        return _settle_orm(hold, used_tokens=used_tokens, kind=kind, model=model, provider=provider,
                           reference=reference, metadata=metadata, draws=draws)


@transaction.atomic
def _settle_orm(hold: CreditHold, *, used_tokens: int, kind: str, model: str, provider: str, reference: str,
                metadata: dict | None, draws: tuple[HoldDraw, ...]) -> CreditLedgerEntry | None:
    _draws_orm(hold, draws)
    balance = _lock_balance(hold.account_id)
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


def hold_release(*, hold: CreditHold, draws: tuple[HoldDraw, ...] = ()) -> CreditHold:
    """Give back everything held (the call never happened), after recording `draws` (what
    was spent in the hold's name before it failed). Idempotent."""
    draws = tuple(draws)
    with contextlib.nullcontext() if connection.in_atomic_block else transaction.atomic():
        if _close_in_one_statement(hold, status=HoldStatus.RELEASED, used_tokens=0, draws=draws) is not None:
            return hold
        return _release_orm(hold, draws)


@transaction.atomic
def _release_orm(hold: CreditHold, draws: tuple[HoldDraw, ...]) -> CreditHold:
    _draws_orm(hold, draws)
    balance = _lock_balance(hold.account_id)
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
