"""Budgets: caps on what one member or one API key may spend per UTC day or month, what
each has spent, and their check, which billing.services runs under the account's balance
row lock in the same transaction as every hold and debit (so it is exact there)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet, Sum
from django.utils import timezone

from accounts.models import Account, ApiKey, Membership
from accounts.permissions import Action, actor_require
from audit.services import audit_record
from billing.error_codes import BillingErrorCode
from billing.errors import BillingError, BudgetExceeded
from billing.models import Budget, BudgetPeriod, CreditHold, CreditLedgerEntry, HoldStatus, Kind
from core.error_codes import CoreErrorCode
from core.errors import NotFound, object_id
from core.text import whole_number

SPEND_KINDS = (Kind.EMBEDDING, Kind.CHAT)


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
    day = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
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


class BudgetNotFound(NotFound):
    default_message = "That budget does not exist."


def budget_access_by_id(*, account, budget_id) -> Budget:
    """The account's budget, or BudgetNotFound (another account's answers like a missing one)."""
    budget_id = object_id(budget_id)
    budget = budget_list(account=account).filter(pk=budget_id).first() if budget_id else None
    if budget is None:
        raise BudgetNotFound()
    return budget


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
    rows = (
        CreditLedgerEntry.objects.for_account(account)
        .filter(who, kind__in=SPEND_KINDS, created_at__gte=month_start, created_at__lt=month_end)
        .values("spent_by_user_id", "spent_by_api_key_id")
        .annotate(day=Sum("delta", filter=Q(created_at__gte=day_start, created_at__lt=day_end)), month=Sum("delta"))
        .order_by()
    )
    held = (
        CreditHold.objects.for_account(account)
        .filter(who, status=HoldStatus.OPEN)
        .values("spent_by_user_id", "spent_by_api_key_id")
        .annotate(held=Sum("amount"))
        .order_by()
    )
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
        statuses.append(
            BudgetStatus(
                budget=b,
                period=b.period,
                limit=b.limit,
                spent=used,
                remaining=max(b.limit - used, 0),
                resets_at=period_window(b.period, now)[1],
            )
        )
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
            raise BudgetExceeded(
                whose="This API key's" if spender.api_key_id else "Your",
                period_label=status.period_label,
                limit=status.limit,
                spent=status.spent,
                needed=needed,
                resets=status.resets,
                account_name=name or "this account",
            )


# --- setting budgets ---------------------------------------------------------------------

MAX_BUDGET = 10**12


def _budget_manager_require(account, actor) -> None:
    """Owners and admins set budgets; an API key never does (accounts.permissions)."""
    actor_require(account=account, actor=actor, action=Action.BUDGETS_MANAGE)


def _budget_target(account, *, user_id=None, api_key_id=None) -> tuple[dict, str]:
    """The budget's target in this account as Budget fields, and how to name it. Another
    account's member or key answers like a missing one (404)."""
    if bool(user_id) == bool(api_key_id):
        raise BillingError(
            BillingErrorCode.INVALID_TARGET, "Choose one member or one API key for the budget.", field="target"
        )
    try:
        if not 0 < int(user_id or api_key_id) < 2**63:
            raise ValueError
        if user_id:
            member = Membership.objects.for_account(account).select_related("user").filter(user_id=int(user_id)).first()
            if member is None:
                raise BillingError(
                    CoreErrorCode.NOT_FOUND, "That member is not in this account.", status=404, field="target"
                )
            return {"user": member.user, "api_key": None}, member.user.email
        key = ApiKey.objects.for_account(account).filter(pk=int(api_key_id)).first()
    except (TypeError, ValueError, OverflowError) as exc:
        raise BillingError(
            BillingErrorCode.INVALID_TARGET, "Choose one member or one API key for the budget.", field="target"
        ) from exc
    if key is None:
        raise BillingError(CoreErrorCode.NOT_FOUND, "That API key is not in this account.", status=404, field="target")
    if not key.is_active:
        raise BillingError(
            BillingErrorCode.INVALID_TARGET, f"The API key {key} is revoked; it spends nothing.", field="target"
        )
    return {"user": None, "api_key": key}, f"API key {key}"


def budget_limit_parse(value) -> int:
    """A whole number of credits from 1 to 1,000,000,000,000; "5,000" and "5 000" are read
    as 5000."""
    number = whole_number(value, minimum=1, maximum=MAX_BUDGET)
    if number is None:
        raise BillingError(
            CoreErrorCode.INVALID_AMOUNT,
            f"The limit must be a whole number of credits from 1 to {MAX_BUDGET:,} (got {str(value)[:40]!r}).",
            field="limit",
        )
    return number


@transaction.atomic
def budget_set(*, account, actor, period: str, limit, user_id=None, api_key_id=None) -> Budget:
    """Cap what one member (`user_id`) or one API key (`api_key_id`) may spend per UTC day or
    month; setting it again for the same target and period changes the limit. Owners and
    admins only. Takes effect with the next hold or debit."""
    _budget_manager_require(account, actor)
    if period not in BudgetPeriod.values:
        raise BillingError(BillingErrorCode.INVALID_PERIOD, "The period must be “day” or “month”.", field="period")
    limit = budget_limit_parse(limit)
    target, name = _budget_target(account, user_id=user_id, api_key_id=api_key_id)
    budgets = Budget.objects.for_account(account)
    existing = budgets.select_for_update().filter(period=period, **target).first()
    previous = existing.limit if existing else None
    if existing is None:
        try:
            with transaction.atomic():
                existing = budgets.create(
                    account=account,
                    period=period,
                    limit=limit,
                    created_by=actor if isinstance(actor, get_user_model()) else None,
                    **target,
                )
        except IntegrityError:  # NOTE: set twice at once: the unique constraint keeps one; update it
            existing = budgets.select_for_update().get(period=period, **target)
    if existing.limit != limit:
        existing.limit = limit
        existing.save(update_fields=["limit", "updated_at"])
    audit_record(
        account=account,
        action="budget.set",
        actor=actor,
        target=f"{BudgetPeriod(period).label.lower()} budget of {name}",
        detail={"period": period, "limit": limit, "previous": previous},
    )
    return existing


@transaction.atomic
def budget_remove(*, account, actor, budget_id) -> None:
    """Remove a budget (owners and admins). Another account's budget answers 404."""
    _budget_manager_require(account, actor)
    budget = budget_access_by_id(account=account, budget_id=budget_id)
    name = budget.user.email if budget.user_id else f"API key {budget.api_key}"
    audit_record(
        account=account,
        action="budget.remove",
        actor=actor,
        target=f"{budget.get_period_display().lower()} budget of {name}",
        detail={"period": budget.period, "limit": budget.limit},
    )
    Budget.objects.for_account(account).filter(pk=budget.pk).delete()
