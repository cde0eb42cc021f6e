"""Reads of credits. Every selector takes the account explicitly."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from accounts.models import Account
from billing.errors import BudgetExceeded, InsufficientCredits
from billing.models import AccountBalance, Budget, BudgetPeriod, CreditHold, CreditLedgerEntry, HoldStatus, Kind

SPEND_KINDS = (Kind.EMBEDDING, Kind.CHAT)


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
    balance also covers the estimate of the whole document (`estimate`, in tokens). The
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
    rows = (CreditLedgerEntry.objects.for_account(account)
            .filter(created_at__gte=since, kind__in=["embedding", "chat"])
            .annotate(day=TruncDate("created_at")).values("day", "kind")
            .annotate(credits=-Sum("delta")).order_by("day", "kind"))
    return list(rows)


def holds_stale(*, older_than: dt.timedelta) -> QuerySet[CreditHold]:
    """Open holds past the timeout, in every account: run inside the tenancy bypass."""
    return CreditHold.all_accounts.filter(status=HoldStatus.OPEN, created_at__lt=timezone.now() - older_than)


# --- budgets ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Spender:
    """Who spends: a member (user) or an API key, never both (a key is never its creator);
    neither for the system and staff, whom no budget limits."""
    user_id: int | None = None
    api_key_id: int | None = None

    @classmethod
    def of(cls, *, user=None, api_key=None) -> Spender:
        key_id = getattr(api_key, "pk", api_key)
        if key_id:
            return cls(api_key_id=key_id)
        return cls(user_id=getattr(user, "pk", user) or None)  # AnonymousUser has pk None

    def __bool__(self) -> bool:
        return bool(self.user_id or self.api_key_id)

    def entry_fields(self) -> dict:
        return {"spent_by_user_id": self.user_id, "spent_by_api_key_id": self.api_key_id}

    def budget_filter(self) -> Q:
        return Q(api_key_id=self.api_key_id) if self.api_key_id else Q(user_id=self.user_id, api_key__isnull=True)


def period_window(period: str, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of the UTC day or month that contains `now`."""
    day = now.astimezone(dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == BudgetPeriod.DAY:
        return day, day + dt.timedelta(days=1)
    start = day.replace(day=1)
    end = (start + dt.timedelta(days=32)).replace(day=1)
    return start, end


def resets_text(period: str, resets_at: dt.datetime) -> str:
    if period == BudgetPeriod.DAY:
        return "at 00:00 UTC"
    return f"on {resets_at.day} {resets_at:%B} at 00:00 UTC"


@dataclass(frozen=True)
class BudgetStatus:
    budget: Budget
    period: str
    limit: int
    spent: int
    remaining: int
    resets_at: dt.datetime

    @property
    def period_label(self) -> str:
        return BudgetPeriod(self.period).label.lower()

    @property
    def resets(self) -> str:
        return resets_text(self.period, self.resets_at)


def budget_list(*, account, spender: Spender | None = None) -> QuerySet[Budget]:
    budgets = Budget.objects.for_account(account).select_related("user", "api_key").order_by("pk")
    return budgets.filter(spender.budget_filter()) if spender is not None else budgets


def budget_get(*, account, budget_id) -> Budget | None:
    """The account's budget, or None (another account's answers like a missing one)."""
    try:
        budget_id = int(budget_id)
    except (TypeError, ValueError):
        return None
    if not 0 < budget_id < 2**63:  # past bigint: missing, not a database error
        return None
    return budget_list(account=account).filter(pk=budget_id).first()


def _spend(account, budgets: list[Budget], now: dt.datetime) -> dict[tuple, int]:
    """What each budget's target spent in its period: settled spending (chat and embedding
    charges, written when they happen) plus every open hold at its full amount. Two queries
    whatever the number of budgets. Inside billing.services this runs under the account's
    balance row lock, which every writer of these rows holds, so the sum is exact."""
    user_ids = {b.user_id for b in budgets if b.user_id}
    key_ids = {b.api_key_id for b in budgets if b.api_key_id}
    who = Q(spent_by_user_id__in=user_ids) | Q(spent_by_api_key_id__in=key_ids)
    day_start, day_end = period_window(BudgetPeriod.DAY, now)
    month_start, month_end = period_window(BudgetPeriod.MONTH, now)
    rows = (CreditLedgerEntry.objects.for_account(account)
            .filter(who, kind__in=SPEND_KINDS, created_at__gte=month_start, created_at__lt=month_end)
            .values("spent_by_user_id", "spent_by_api_key_id")
            .annotate(day=Sum("delta", filter=Q(created_at__gte=day_start, created_at__lt=day_end)),
                      month=Sum("delta")).order_by())
    held = (CreditHold.objects.for_account(account).filter(who, status=HoldStatus.OPEN)
            .values("spent_by_user_id", "spent_by_api_key_id").annotate(held=Sum("amount")).order_by())
    spent: dict[tuple, int] = {}
    for row in rows:
        target = (row["spent_by_user_id"], row["spent_by_api_key_id"])
        spent[(*target, BudgetPeriod.DAY)] = -(row["day"] or 0)
        spent[(*target, BudgetPeriod.MONTH)] = -(row["month"] or 0)
    for row in held:
        for period in BudgetPeriod.values:
            key = (row["spent_by_user_id"], row["spent_by_api_key_id"], period)
            spent[key] = spent.get(key, 0) + (row["held"] or 0)
    return spent


def budget_statuses(*, account, budgets, now: dt.datetime | None = None) -> list[BudgetStatus]:
    """Each budget with what its target spent in the current period and what is left."""
    budgets = list(budgets)
    if not budgets:
        return []
    now = now or timezone.now()
    spent = _spend(account, budgets, now)
    statuses = []
    for b in budgets:
        used = spent.get((b.user_id, b.api_key_id, b.period), 0)
        statuses.append(BudgetStatus(budget=b, period=b.period, limit=b.limit, spent=used,
                                     remaining=max(b.limit - used, 0), resets_at=period_window(b.period, now)[1]))
    return statuses


def budget_status_for(*, account, user=None, api_key=None, now: dt.datetime | None = None) -> list[BudgetStatus]:
    """The principal's own budgets (daily first) with spent, remaining and when each resets."""
    spender = Spender.of(user=user, api_key=api_key)
    if not spender:
        return []
    budgets = sorted(budget_list(account=account, spender=spender), key=lambda b: b.period != BudgetPeriod.DAY)
    return budget_statuses(account=account, budgets=budgets, now=now)


def budget_require(*, account, spender: Spender, needed: int, now: dt.datetime | None = None) -> None:
    """BudgetExceeded when one of the spender's budgets cannot cover `needed` more credits.
    billing.services calls it under the balance row lock, which makes it exact; elsewhere
    it is a courtesy check ahead of the real one."""
    for status in budget_status_for(account=account, user=spender.user_id, api_key=spender.api_key_id, now=now):
        if status.spent + needed > status.limit:
            name = Account.objects.filter(pk=getattr(account, "pk", account)).values_list("name", flat=True).first()
            raise BudgetExceeded(whose="This API key's" if spender.api_key_id else "Your",
                                 period_label=status.period_label, limit=status.limit, spent=status.spent,
                                 needed=needed, resets=status.resets, account_name=name or "this account")
