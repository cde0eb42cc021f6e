"""Fair queues across accounts: which account's waiting work a free worker takes next. One
rule, used by every queue of work that accounts wait for (documents' ingestion,
documents/ingestion_queue.py; sources' syncs, sources/sync_queue.py):

    the account with the fewest items in flight, then never served or served least
    recently, then waiting longest; within the account, its oldest item.

rq's queue is first in, first out, so a job per item lets one account's backlog hold every
other account's work behind it. Instead, each item queues the same job, "take the next one,
fairly", and the job claims an item from PostgreSQL when it starts. So an item of account B
waits at most for the jobs already running, whatever account A has queued, and the queue
holds as many jobs as there are items waiting.

Each account has a lane in the queue's table (a `FairLane`): `waiting` while it has items
waiting, `waiting_since`, and `served_at`, its last fair claim. The claim reads the fairest
waiting lanes through a partial index on (served_at NULLS FIRST, waiting_since, account)
WHERE waiting, so its cost does not grow with the number of accounts waiting
(docs/benchmarks.md, "The claim with thousands of accounts waiting"). Whatever makes an
item wait marks its lane waiting in the same transaction (a trigger, or `mark_waiting`);
the claim marks it idle, under the lane's row lock, once nothing of the account waits.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from django.db import models

from core.tenancy import TenantModel

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper
    from rq import Queue

# Lanes read per query while looking for one with an item to take (a lane whose items are
# all locked by another transaction, or otherwise not takeable, is passed over).
LANE_BATCH = 32

T = TypeVar("T")


class FairLane(TenantModel):
    """An account's place in a fair queue (the concrete model adds the partial index)."""

    account = models.OneToOneField("accounts.Account", on_delete=models.CASCADE, primary_key=True, related_name="+")
    waiting = models.BooleanField(default=False)
    waiting_since = models.DateTimeField(null=True, blank=True)
    served_at = models.DateTimeField(null=True, blank=True)

    class Meta(TenantModel.Meta):
        abstract = True


def fairest_index(name: str) -> models.Index:
    """The partial index a queue's claim reads its lanes through, in the rule's order among
    accounts with nothing in flight: never served first, then served least recently, then
    waiting longest (FairQueue.idle_lanes_sql)."""
    return models.Index(
        models.F("served_at").asc(nulls_first=True),
        "waiting_since",
        "account",
        condition=models.Q(waiting=True),
        name=name,
    )


@dataclass(frozen=True)
class FairQueue:
    """One fair queue: what it holds (`item`, e.g. "document", for the log its app's
    `logger` writes), its lanes' table, the advisory lock that serialises its claims (any
    number, its own), the id prefix of its "take the next one" jobs, and `waiting_sql`: a
    query that has a row while the account `%(account)s` still has an item waiting (with
    `waiting_params`, constants such as statuses)."""

    item: str
    logger: str
    lanes: str
    lock: int
    job_prefix: str
    waiting_sql: str
    waiting_params: dict = field(default_factory=dict)

    # Waiting lanes of accounts with nothing in flight, fairest first, through the partial
    # index: O(log n) however many accounts wait.
    @property
    def idle_lanes_sql(self) -> str:
        return (
            f"SELECT account_id FROM {self.lanes}\n"
            "WHERE waiting AND NOT (account_id = ANY(%(skip)s))\n"
            "ORDER BY served_at ASC NULLS FIRST, waiting_since, account_id\n"
            "LIMIT %(limit)s"
        )

    # Waiting lanes of accounts with items in flight (at most one per busy account).
    @property
    def busy_lanes_sql(self) -> str:
        return f"SELECT account_id, served_at, waiting_since FROM {self.lanes} WHERE waiting AND account_id = ANY(%(busy)s)"

    # The lane's row lock, taken before its items are looked at: an item that starts waiting
    # meanwhile marks the lane (mark_waiting, or a trigger) only after this claim commits.
    @property
    def lock_lane_sql(self) -> str:
        return f"SELECT 1 FROM {self.lanes} WHERE account_id = %s AND waiting FOR UPDATE"

    # (The clock's time, not the transaction's: claims in one transaction still have an order.)
    @property
    def served_sql(self) -> str:
        return f"UPDATE {self.lanes} SET served_at = clock_timestamp() WHERE account_id = %s"

    # Nothing of the account waits any more: the lane stops waiting.
    @property
    def idle_sql(self) -> str:
        return (
            f"UPDATE {self.lanes} SET waiting = false, waiting_since = NULL\n"
            f"WHERE account_id = %(account)s AND NOT EXISTS ({self.waiting_sql})"
        )

    def idle_params(self, account_id: int) -> dict:
        return {**self.waiting_params, "account": account_id}

    def mark_waiting(self, cursor: CursorWrapper, account_id: int) -> None:
        """The account has an item waiting (call it in the transaction that makes it wait,
        under the account's context: the lanes are tenant rows)."""
        cursor.execute(
            f"INSERT INTO {self.lanes} AS lane (account_id, waiting, waiting_since, served_at)"
            " VALUES (%s, true, clock_timestamp(), NULL) ON CONFLICT (account_id) DO UPDATE"
            " SET waiting = true, waiting_since = clock_timestamp() WHERE NOT lane.waiting",
            [account_id],
        )

    def claim(
        self, cursor: CursorWrapper, *, busy_sql: str, busy_params: dict, take: Callable[[int], T | None]
    ) -> T | None:
        """The fairest account's next item, taken by `take(account_id)` (None: nothing of
        that account can be taken now); None when no account has one. Runs in the caller's
        transaction, which must see every account (the caller's audited bypass).

        `busy_sql` answers (account_id, items in flight) for the accounts with any.

        NOTE: two workers claiming at once are serialised by the queue's advisory lock
        (transaction-scoped, held for the few milliseconds a claim takes), so each ranks the
        accounts with the claims before it already counted; `take` should still lock its
        item (FOR UPDATE SKIP LOCKED) against other writers."""
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [self.lock])
        cursor.execute(busy_sql, busy_params)
        busy = dict(cursor.fetchall())
        for account_id in self._fairest(cursor, busy):
            cursor.execute(self.lock_lane_sql, [account_id])
            if cursor.fetchone() is None:  # marked idle by a claim that committed meanwhile
                continue
            item = take(account_id)
            if item is not None:
                cursor.execute(self.served_sql, [account_id])
                logging.getLogger(self.logger).info(
                    "claimed %s %s of account %s (%d accounts with %ss in flight)",
                    self.item,
                    getattr(item, "pk", item),
                    account_id,
                    len(busy),
                    self.item,
                )
                return item
            cursor.execute(self.idle_sql, self.idle_params(account_id))
        return None

    def _fairest(self, cursor: CursorWrapper, busy: dict[int, int]) -> Iterator[int]:
        """Waiting accounts, fairest first: those with nothing in flight from the index, a
        batch at a time (a lane that gave nothing is skipped by the next batch), then the busy
        ones by how many they have in flight."""
        skip = list(busy)
        while True:
            cursor.execute(self.idle_lanes_sql, {"skip": skip, "limit": LANE_BATCH})
            lanes = [row[0] for row in cursor.fetchall()]
            if not lanes:
                break
            for account_id in lanes:
                yield account_id
                skip.append(account_id)
        if busy:
            cursor.execute(self.busy_lanes_sql, {"busy": list(busy)})
            never = dt.datetime.min.replace(tzinfo=dt.UTC)
            for account_id, _, _ in sorted(
                cursor.fetchall(),
                key=lambda lane: (busy[lane[0]], lane[1] is not None, lane[1] or never, lane[2] or never, lane[0]),
            ):
                yield account_id

    def jobs_missing(self, waiting: int, queue: Queue) -> int:
        """How many "take the next one" jobs to queue so `waiting` items each have one.
        Counted by id (a list of strings from Redis), not by loading every job: a backlog of
        10,000 jobs took ~0.6 s of the scheduler's CPU a minute that way. A retry keeps its
        job's id, so retries waiting their turn count too."""
        if not waiting:
            return 0
        job_ids = queue.get_job_ids() + queue.scheduled_job_registry.get_job_ids()
        queued = sum(1 for job_id in job_ids if job_id.startswith(self.job_prefix))
        return max(0, waiting - queued)
