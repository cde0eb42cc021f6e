"""Writes to the credit ledger. The only code that creates ledger entries.

Every operation is idempotent by its key (unique per account): the same call twice changes
nothing the second time and returns the same result; the same key with a different amount
is refused, because a key names one operation. Spenders of one account are serialised on
its balance row (SELECT … FOR UPDATE), and a CHECK keeps the balance at or above zero.
"""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from accounts.models import Account
from audit.actors import SYSTEM
from audit.services import audit_record
from billing.errors import BillingError, IdempotencyConflict, InsufficientCredits
from billing.models import AccountBalance, CreditHold, CreditLedgerEntry, HoldStatus, Kind

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
        raise IdempotencyConflict(
            "idempotency_conflict",
            f"The key “{key}” was already used for a different operation ({entry.kind} {entry.delta:+d}); "
            "a key names one operation. Use a new key."
        )
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
    return _append(balance, kind=kind, delta=amount, key=key, reference=reference,
                   created_by=actor, metadata={"reason": reason})


@transaction.atomic
def credits_debit(*, account: Account, tokens: int, key: str, kind: str, model: str = "", provider: str = "",
                  reference: str = "", metadata: dict | None = None) -> CreditLedgerEntry:
    """Charge provider-reported tokens 1:1 (at least MIN_CREDITS_PER_CALL per call), all or
    nothing: InsufficientCredits writes nothing."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise BillingError("invalid_amount", f"Tokens must be a whole number, zero or more (got {tokens!r}).")
    tokens = max(tokens, MIN_CREDITS_PER_CALL)
    if kind not in SPEND_KINDS:
        raise BillingError("invalid_kind", f"{kind} is not a kind of spending.")
    key = _key(key)
    balance = _lock_balance(account)
    existing = _existing(account, key, kind=kind, tokens=tokens)
    if existing:
        return existing
    if balance.balance < tokens:
        raise InsufficientCredits(needed=tokens, balance=balance.balance)
    return _append(balance, kind=kind, delta=-tokens, key=key, tokens=tokens, model=model, provider=provider,
                   reference=reference, metadata=metadata or {})


@transaction.atomic
def credits_hold(*, account: Account, amount: int, key: str, reference: str = "") -> CreditHold:
    """Reserve `amount` credits (the worst case of a model call) before making the call."""
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
    _append(balance, kind=Kind.HOLD, delta=-amount, key=key, reference=reference)
    return CreditHold.objects.for_account(account).create(account=account, key=key, amount=amount, reference=reference)


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
    _append(balance, kind=Kind.HOLD_RELEASE, delta=hold.amount, key=f"{hold.key}:release", reference=hold.reference)
    entry = None
    if used_tokens:
        charged = min(used_tokens, balance.balance)
        entry = _append(balance, kind=kind, delta=-charged, key=charge_key, tokens=used_tokens,
                        shortfall=used_tokens - charged, model=model, provider=provider,
                        reference=reference or hold.reference, metadata=metadata or {})
    _close(hold, HoldStatus.SETTLED, used_tokens)
    return entry


@transaction.atomic
def hold_release(*, hold: CreditHold) -> CreditHold:
    """Give back everything held (the call never happened). Idempotent."""
    balance = _lock_balance(hold.account)
    hold = _lock_hold(hold)
    if hold.status == HoldStatus.OPEN:
        _append(balance, kind=Kind.HOLD_RELEASE, delta=hold.amount, key=f"{hold.key}:release",
                reference=hold.reference)
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
