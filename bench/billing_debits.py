"""Debit throughput: entries per second, single-threaded and with 8 spenders on one account.

Each debit is a full service call: lock the balance row, check the idempotency key, insert
the ledger entry, update the balance, commit.
"""
from __future__ import annotations

import threading
import time
import uuid

DEBITS_SINGLE = 2000
SPENDERS = 8
DEBITS_EACH = 250


def _account(credits: int):
    from accounts.services import account_create
    from accounts.models import User

    owner = User.objects.create_user(email=f"bench-{uuid.uuid4().hex[:8]}@bench.test", password=None)
    return account_create(name="bench", owner=owner, initial_credits=credits)


def _debit_loop(account, n: int, prefix: str) -> None:
    from core.tenancy import account_context
    from billing.services import credits_debit

    for i in range(n):
        with account_context(account):
            credits_debit(account=account, tokens=1, key=f"{prefix}-{i}", kind="chat")


def run() -> dict:
    from django.db import connection

    account = _account(DEBITS_SINGLE)
    started = time.perf_counter()
    _debit_loop(account, DEBITS_SINGLE, "single")
    single = DEBITS_SINGLE / (time.perf_counter() - started)

    account = _account(SPENDERS * DEBITS_EACH)
    connection.close()

    def spender(n):
        try:
            _debit_loop(account, DEBITS_EACH, f"s{n}")
        finally:
            connection.close()

    threads = [threading.Thread(target=spender, args=(n,)) for n in range(SPENDERS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    contended = SPENDERS * DEBITS_EACH / (time.perf_counter() - started)
    from core.tenancy import account_context
    from billing.selectors import balance_get

    with account_context(account):
        assert balance_get(account=account) == 0, "every debit must have landed exactly once"
    return {
        "single_thread_debits_per_s": round(single),
        "contended_8_debits_per_s": round(contended),
        "settings": f"{DEBITS_SINGLE} sequential debits; {SPENDERS} threads x {DEBITS_EACH} debits on one account",
    }
