"""What the signed row-level-security context costs (core/rls.py).

Policies read the context through groundwork_private.ctx_*(), which recompute the context's
signature: once per statement and table (an InitPlan), not once per row. Measured here:
- one evaluation of the signed check versus reading the setting as the old policies did;
- a statement under RLS (the balance row by account, as every spender reads it) and a
  300-row read of one account's ledger, each as the app's role inside a signed context.
"""

from __future__ import annotations

import time

from django.db import connection

from bench.common import percentile

CALLS = 20_000
STATEMENTS = 2_000


def _per_call_us(cursor, expression: str) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        cursor.execute(f"SELECT count({expression}) FROM generate_series(1, {CALLS})")
        cursor.fetchone()
        best = min(best, time.perf_counter() - started)
    return round(best / CALLS * 1e6, 2)


def _statement_ms(cursor, sql: str, params: list) -> dict:
    timings = []
    for _ in range(STATEMENTS):
        started = time.perf_counter()
        cursor.execute(sql, params)
        cursor.fetchall()
        timings.append(time.perf_counter() - started)
    return {"p50_ms": round(1000 * percentile(timings, 50), 3), "p95_ms": round(1000 * percentile(timings, 95), 3)}


def run() -> dict:
    from accounts.tests.factories import make_account
    from billing.services import credits_grant
    from core.tenancy import account_context

    account = make_account("bench rls context", owner_email="rls-bench@bench.test")
    with account_context(account):
        for i in range(300):
            credits_grant(account=account, amount=1, reason="bench", key=f"bench-rls-{i}")
    out = {}
    with account_context(account), connection.cursor() as cursor:
        out["signed_check_us_per_call"] = _per_call_us(cursor, "groundwork_private.ctx_account_id()")
        out["plain_setting_us_per_call"] = _per_call_us(
            cursor, "NULLIF(current_setting('app.account_id', true), '')::bigint"
        )
        out["balance_row_by_account"] = _statement_ms(
            cursor, "SELECT balance FROM billing_accountbalance WHERE account_id = %s", [account.pk]
        )
        out["ledger_300_rows"] = _statement_ms(
            cursor, "SELECT id, delta FROM billing_creditledgerentry WHERE account_id = %s", [account.pk]
        )
        cursor.execute(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT balance FROM billing_accountbalance WHERE account_id = %s",
            [account.pk],
        )
        out["plan"] = " / ".join(row[0].strip() for row in cursor.fetchall())
    return out
