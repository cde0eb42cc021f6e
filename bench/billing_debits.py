"""Debit throughput: entries per second, single-threaded, with 8 spenders on one account, and
with 8 spenders on 8 accounts (one each), as threads of one process and as 8 processes (what
web and worker processes are: each its own interpreter, no shared GIL).

Each debit is a full service call: set the account context, lock the balance row, check the
idempotency key, insert the ledger entry, update the balance, commit (synchronous_commit on:
a debit is durable once acknowledged).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import uuid

DEBITS_SINGLE = 2000
SPENDERS = 8
DEBITS_EACH = 250


def _account(credits: int):
    from accounts.models import User
    from accounts.services import account_create

    owner = User.objects.create_user(email=f"bench-{uuid.uuid4().hex[:8]}@bench.test", password=None)
    return account_create(name="bench", owner=owner, initial_credits=credits)


def _debit_loop(account, n: int, prefix: str) -> None:
    from billing.services import credits_debit
    from core.tenancy import account_context

    for i in range(n):
        with account_context(account):
            credits_debit(account=account, tokens=1, key=f"{prefix}-{i}", kind="chat")


def _spenders(accounts: list) -> float:
    """SPENDERS threads, thread n spending DEBITS_EACH on accounts[n % len(accounts)], each on
    its own connection. Debits per second over all of them."""
    from django.db import connection

    connection.close()
    run = uuid.uuid4().hex[:6]

    def spender(n):
        try:
            _debit_loop(accounts[n % len(accounts)], DEBITS_EACH, f"{run}-s{n}")
        finally:
            connection.close()

    threads = [threading.Thread(target=spender, args=(n,)) for n in range(SPENDERS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return SPENDERS * DEBITS_EACH / (time.perf_counter() - started)


def _spender_process(account, n: int, run: str, times) -> None:
    from django.db import connection

    started = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
    try:
        _debit_loop(account, DEBITS_EACH, f"{run}-p{n}")
    finally:
        connection.close()
    times.put((started, time.perf_counter()))


def _spender_processes(accounts: list) -> float:
    """Like _spenders, with SPENDERS forked processes; debits per second from the first
    start to the last finish."""
    from django.db import connection

    connection.close()  # never share a connection (or a pool of them) across fork
    if connection.settings_dict["OPTIONS"].get("pool"):
        connection.close_pool()
    run, ctx = uuid.uuid4().hex[:6], multiprocessing.get_context("fork")
    times = ctx.Queue()
    procs = [
        ctx.Process(target=_spender_process, args=(accounts[n % len(accounts)], n, run, times)) for n in range(SPENDERS)
    ]
    for p in procs:
        p.start()
    spans = [times.get() for _ in procs]
    for p in procs:
        p.join()
        assert p.exitcode == 0, "a spender process failed"
    return SPENDERS * DEBITS_EACH / (max(end for _, end in spans) - min(start for start, _ in spans))


def _assert_spent(accounts: list) -> None:
    from billing.selectors import balance_get
    from core.tenancy import account_context

    for account in accounts:
        with account_context(account):
            assert balance_get(account=account) == 0, "every debit must have landed exactly once"


def run() -> dict:
    load_before = os.getloadavg()
    account = _account(DEBITS_SINGLE)
    started = time.perf_counter()
    _debit_loop(account, DEBITS_SINGLE, "single")
    single = DEBITS_SINGLE / (time.perf_counter() - started)
    _assert_spent([account])

    one = [_account(SPENDERS * DEBITS_EACH)]
    contended = _spenders(one)
    _assert_spent(one)

    eight = [_account(DEBITS_EACH) for _ in range(SPENDERS)]
    spread = _spenders(eight)
    _assert_spent(eight)

    eight = [_account(DEBITS_EACH) for _ in range(SPENDERS)]
    processes = _spender_processes(eight)
    _assert_spent(eight)
    return {
        "single_thread_debits_per_s": round(single),
        "contended_8_debits_per_s": round(contended),
        "spread_8_on_8_accounts_debits_per_s": round(spread),
        "spread_8_processes_on_8_accounts_debits_per_s": round(processes),
        "load_average_before_after": [round(x, 2) for x in (*load_before, *os.getloadavg())],
        "settings": f"{DEBITS_SINGLE} sequential debits; {SPENDERS} threads x {DEBITS_EACH} debits on one account; "
        f"{SPENDERS} threads x {DEBITS_EACH} debits, one account each; the same with {SPENDERS} processes",
    }
