"""Read-only helpers for the credits page: the ledger as a person reads it, and the daily
usage chart drawn as server-rendered SVG (no JavaScript, no chart library)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from billing.models import CreditHold, CreditLedgerEntry, HoldStatus, Kind
from billing.selectors import ledger_list, ledger_usage_by_day

# Holds and their releases are bookkeeping around each chat answer: they net to zero once
# settled, so the page hides them unless asked.
BOOKKEEPING_KINDS = (Kind.HOLD, Kind.HOLD_RELEASE)
CHART_KINDS = (("embedding", "Embedding (documents)"), ("chat", "Chat (answers)"))

# SVG geometry, in viewBox units; the SVG scales to its container.
WIDTH, HEIGHT = 720, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 12, 30


def shows_settled(*, kind: str | None = None, include_holds: bool = False) -> bool:
    """Whether the ledger is read as settled entries only (holds and releases hidden)."""
    return not include_holds and kind not in BOOKKEEPING_KINDS


def ledger_entries(*, account, kind: str | None = None, include_holds: bool = False) -> QuerySet[CreditLedgerEntry]:
    """The ledger as the page lists it, newest first.

    Settled view (the default): holds and their releases are hidden, and each entry carries
    `settled_balance`, the balance after it counting settled entries only (every kind, even
    when the list is filtered to one), so consecutive rows differ by exactly their change.
    It differs from the stored `balance_after` only by credits held at that moment: with
    holds shown, `balance_after` is itself a running balance of the rows shown."""
    entries = ledger_list(account=account, kind=kind or None)
    if not shows_settled(kind=kind, include_holds=include_holds):
        return entries
    upto = (
        CreditLedgerEntry.objects.for_account(account)
        .exclude(kind__in=BOOKKEEPING_KINDS)
        .filter(Q(created_at__lt=OuterRef("created_at")) | Q(created_at=OuterRef("created_at"), pk__lte=OuterRef("pk")))
        .order_by()
        .values("account")
        .annotate(total=Sum("delta"))
        .values("total")
    )
    return entries.exclude(kind__in=BOOKKEEPING_KINDS).annotate(settled_balance=Coalesce(Subquery(upto), 0))


def held_credits(*, account) -> int:
    """Credits reserved right now by open holds (answers being written)."""
    held = CreditHold.objects.for_account(account).filter(status=HoldStatus.OPEN).aggregate(total=Sum("amount"))
    return int(held["total"] or 0)


@dataclass
class DayBar:
    day: dt.date
    credits: dict[str, int]
    total: int = 0
    x: float = 0.0
    width: float = 0.0
    segments: list[dict] = field(default_factory=list)
    label: str = ""
    show_tick: bool = False


@dataclass
class UsageChart:
    days: list[DayBar]
    totals: dict[str, int]
    total: int
    max_value: int
    ticks: list[dict]
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    plot_bottom: int = HEIGHT - BOTTOM
    kinds: tuple = CHART_KINDS

    @property
    def summary(self) -> str:
        parts = ", ".join(f"{self.totals[k]:,} {label.split(' ')[0].lower()}" for k, label in self.kinds)
        return f"{self.total:,} credits spent in the last {len(self.days)} days ({parts})."


def _nice_max(value: int) -> int:
    """The smallest 1/2/2.5/5 × 10^n at or above value, so the axis reads in round numbers."""
    if value <= 0:
        return 10
    magnitude = 10 ** (len(str(int(value))) - 1)
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return int(step * magnitude)
    return 10 * magnitude


def usage_chart(*, account, days: int = 30, today: dt.date | None = None) -> UsageChart:
    """Credits spent per day by kind (embedding vs chat) over `days` days ending today,
    with every day present (zero days too) and the bars' geometry precomputed."""
    today = today or timezone.localdate()
    first = today - dt.timedelta(days=days - 1)
    spent: dict[dt.date, dict[str, int]] = {}
    for row in ledger_usage_by_day(account=account, days=days):
        if row["day"] >= first:
            spent.setdefault(row["day"], {})[row["kind"]] = int(row["credits"] or 0)
    bars = []
    for offset in range(days):
        day = first + dt.timedelta(days=offset)
        credits = {kind: max(spent.get(day, {}).get(kind, 0), 0) for kind, _ in CHART_KINDS}
        bars.append(DayBar(day=day, credits=credits, total=sum(credits.values())))
    top = _nice_max(max((b.total for b in bars), default=0))
    _layout(bars, top)
    totals = {kind: sum(b.credits[kind] for b in bars) for kind, _ in CHART_KINDS}
    ticks = [{"value": top * i // 4, "y": round(_y(top * i / 4, top), 1)} for i in range(5)]
    return UsageChart(days=bars, totals=totals, total=sum(totals.values()), max_value=top, ticks=ticks)


def _y(value: float, top: int) -> float:
    plot = HEIGHT - BOTTOM - TOP
    return HEIGHT - BOTTOM - plot * (value / top)


def _layout(bars: list[DayBar], top: int) -> None:
    slot = (WIDTH - RIGHT - LEFT) / len(bars)
    for index, bar in enumerate(bars):
        bar.x = round(LEFT + index * slot + slot * 0.15, 1)
        bar.width = round(slot * 0.7, 1)
        bar.label = bar.day.strftime("%b %-d")
        # A tick every 5 days, counted back from today so the last bar is always labelled.
        bar.show_tick = (len(bars) - 1 - index) % 5 == 0
        base = 0
        for kind, _ in CHART_KINDS:
            amount = bar.credits[kind]
            if amount:
                y_top = _y(base + amount, top)
                # Tiny days stay visible: at least one unit tall.
                height = max(_y(base, top) - y_top, 1.0)
                bar.segments.append({"kind": kind, "y": round(_y(base, top) - height, 1), "height": round(height, 1)})
            base += amount
