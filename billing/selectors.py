"""Reads of credits. Every selector takes the account explicitly."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db.models import QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from billing.budgets import Spender, budget_require
from billing.errors import InsufficientCredits
from billing.models import AccountBalance, CreditHold, CreditLedgerEntry, HoldStatus


def balance_get(*, account) -> int:
    row = AccountBalance.objects.for_account(account).values_list("balance", flat=True).first()
    return row or 0


def credits_require(*, account, needed: int) -> int:
    """The balance, or InsufficientCredits when it is below `needed`."""
    balance = balance_get(account=account)
    if balance < needed:
        raise InsufficientCredits(needed=needed, balance=balance)
    return balance


def ingest_credits_require(*, account, estimate: int = 0, user=None, api_key=None) -> int:
    """Ingestion starts only with MIN_CREDITS_TO_INGEST in hand, and embeds only when the
    balance also covers the estimate of the whole document (`estimate`, in credits: the
    document's credits_estimate, priced by billing.pricing when it was counted). The
    uploader's budgets must cover the same amount (BudgetExceeded); the debit itself
    enforces them exactly."""
    needed = max(settings.MIN_CREDITS_TO_INGEST, estimate)
    balance = credits_require(account=account, needed=needed)
    spender = Spender.of(user=user, api_key=api_key)
    if spender:
        budget_require(account=account, spender=spender, needed=needed)
    return balance


def ledger_list(*, account, kind: str | None = None) -> QuerySet[CreditLedgerEntry]:
    entries = CreditLedgerEntry.objects.for_account(account).order_by("-created_at", "-pk")
    return entries.filter(kind=kind) if kind else entries


def ledger_usage_by_day(*, account, days: int = 30) -> list[dict]:
    """Credits spent per day and kind over the last `days` days (spending kinds only)."""
    since = timezone.now() - dt.timedelta(days=days)
    rows = (
        CreditLedgerEntry.objects.for_account(account)
        .filter(created_at__gte=since, kind__in=["embedding", "chat"])
        .annotate(day=TruncDate("created_at"))
        .values("day", "kind")
        .annotate(credits=-Sum("delta"))
        .order_by("day", "kind")
    )
    return list(rows)


def holds_stale(*, older_than: dt.timedelta) -> QuerySet[CreditHold]:
    """Open holds past the timeout, in every account: run inside the tenancy bypass."""
    return CreditHold.all_accounts.filter(status=HoldStatus.OPEN, created_at__lt=timezone.now() - older_than)


def ledger_table() -> str:
    """The ledger's table name, for operators' tools that count or dump it (config/backup.py's
    manifest) without naming the ledger's model outside billing."""
    return CreditLedgerEntry._meta.db_table
