"""What operators see of an account's money (the admin's account page, `manage.py
export_ledger`): its grants and purchases, its spend per day and per model, and a month of its
ledger as CSV. Selectors take `account=` and run inside the account's context, like every
other billing selector; nothing outside billing reads the ledger's model."""

from __future__ import annotations

import csv
import datetime as dt
import re
from dataclasses import dataclass

from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from audit.services import audit_record
from billing.models import CreditLedgerEntry, Kind

# Ledger kinds that move credits in from outside or take them back: a staff grant or a paid
# Stripe purchase (both grants; a purchase's reference is "purchase:<id>"), sign-up credits,
# and an adjustment (what a refund takes back, billing.services.credits_take_back).
CREDITS_IN_KINDS = (Kind.GRANT, Kind.SIGNUP, Kind.ADJUSTMENT)
SPENDING_KINDS = (Kind.EMBEDDING, Kind.CHAT)
EXPORT_COLUMNS = ("date", "kind", "model", "tokens", "credits", "balance after", "reference", "actor")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


class MonthError(ValueError):
    """A month that is not YYYY-MM (the message says so)."""


def month_parse(text: str) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) in UTC of a month written "2026-11"."""
    match = _MONTH.match((text or "").strip())
    if not match or not 1 <= int(match[2]) <= 12 or int(match[1]) < 2000:
        raise MonthError(f"“{text}” is not a month: write it as YYYY-MM, e.g. 2026-11.")
    year, month = int(match[1]), int(match[2])
    start = dt.datetime(year, month, 1, tzinfo=dt.UTC)
    end = dt.datetime(year + month // 12, month % 12 + 1, 1, tzinfo=dt.UTC)
    return start, end


def credits_in_list(*, account, limit: int = 50) -> list[CreditLedgerEntry]:
    """The account's grants (purchases included), sign-up credits and adjustments, newest first."""
    return list(
        CreditLedgerEntry.objects.for_account(account)
        .filter(kind__in=CREDITS_IN_KINDS)
        .select_related("created_by")
        .order_by("-created_at", "-pk")[:limit]
    )


@dataclass(frozen=True)
class Spend:
    label: str  # a day (YYYY-MM-DD) or a model
    credits: int
    tokens: int
    calls: int


def spend_per_day(*, account, days: int = 30, now: dt.datetime | None = None) -> list[Spend]:
    """Credits charged per day (embedding and chat), the last `days` days, newest first;
    days without a charge are left out."""
    since = (now or timezone.now()) - dt.timedelta(days=days)
    rows = (
        CreditLedgerEntry.objects.for_account(account)
        .filter(kind__in=SPENDING_KINDS, created_at__gte=since)
        .annotate(day=TruncDate("created_at", tzinfo=dt.UTC))
        .values("day")
        .annotate(credits=-Sum("delta"), tokens=Sum("tokens"), calls=Count("pk"))
        .order_by("-day")
    )
    return [Spend(f"{r['day']:%Y-%m-%d}", r["credits"], r["tokens"] or 0, r["calls"]) for r in rows]


def spend_per_model(*, account, days: int = 30, now: dt.datetime | None = None) -> list[Spend]:
    """Credits charged per model (the ledger entry's model), the last `days` days, dearest
    first."""
    since = (now or timezone.now()) - dt.timedelta(days=days)
    rows = (
        CreditLedgerEntry.objects.for_account(account)
        .filter(kind__in=SPENDING_KINDS, created_at__gte=since)
        .values("model", "kind")
        .annotate(credits=-Sum("delta"), tokens=Sum("tokens"), calls=Count("pk"))
        .order_by("-credits", "model")
    )
    return [
        Spend(f"{r['model'] or 'unnamed model'} ({r['kind']})", r["credits"], r["tokens"] or 0, r["calls"])
        for r in rows
    ]


def ledger_month_list(*, account, start: dt.datetime, end: dt.datetime) -> QuerySet[CreditLedgerEntry]:
    """Every ledger entry of the account in [start, end), oldest first."""
    return (
        CreditLedgerEntry.objects.for_account(account)
        .filter(created_at__gte=start, created_at__lt=end)
        .select_related("created_by", "spent_by_user", "spent_by_api_key")
        .order_by("created_at", "pk")
    )


def _actor(entry: CreditLedgerEntry) -> str:
    if entry.created_by_id:
        return entry.created_by.email
    if entry.spent_by_api_key_id:
        key = entry.spent_by_api_key
        return f"API key {key.name} ({key.prefix}…)"
    if entry.spent_by_user_id:
        return entry.spent_by_user.email
    return "system"


def _cell(value: str) -> str:
    """A cell a spreadsheet will not run as a formula."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def ledger_export_csv(*, account, month: str, out, actor=None) -> int:
    """Write the account's ledger for `month` ("2026-11") to the text stream `out` as CSV
    (EXPORT_COLUMNS; dates in UTC) and audit it (ledger.export). Returns the rows written.
    MonthError for a month that is not YYYY-MM, before anything is written."""
    start, end = month_parse(month)
    writer = csv.writer(out)
    writer.writerow(EXPORT_COLUMNS)
    rows = 0
    for e in ledger_month_list(account=account, start=start, end=end).iterator(chunk_size=2000):
        writer.writerow(
            [
                e.created_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
                e.kind,
                _cell(e.model),
                e.tokens,
                e.delta,
                e.balance_after,
                _cell(e.reference or (e.metadata or {}).get("reason", "")),
                _cell(_actor(e)),
            ]
        )
        rows += 1
    audit_record(
        account=account,
        action="ledger.export",
        actor=actor,
        target=f"{start:%Y-%m}",
        detail={"month": f"{start:%Y-%m}", "rows": rows},
    )
    return rows
