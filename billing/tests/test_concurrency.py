"""Concurrent spenders on one account are serialised on its balance row."""

import threading

import pytest
from django.db.models import Sum

from billing.errors import InsufficientCredits
from billing.models import CreditLedgerEntry
from billing.selectors import balance_get
from billing.services import credits_debit, credits_hold, hold_settle
from billing.tests.threads import run_at_once
from core.tenancy import account_context

SPENDERS = 8
OPS = 25


@pytest.mark.django_db(transaction=True)
def test_eight_concurrent_spenders_never_overdraw_or_lose_an_update():
    from accounts.services import account_create
    from accounts.tests.factories import make_user

    account = account_create(name="Busy", owner=make_user(), initial_credits=1500)
    results = {"ok": 0, "refused": 0, "tokens": 0}
    lock = threading.Lock()

    def spender(n):
        for i in range(OPS):
            tokens = 7 + (n + i) % 11
            try:
                with account_context(account):
                    if i % 3 == 0:
                        hold = credits_hold(account=account, amount=tokens * 2, key=f"h-{n}-{i}")
                        hold_settle(hold=hold, used_tokens=tokens)
                    else:
                        credits_debit(account=account, tokens=tokens, key=f"d-{n}-{i}", kind="chat")
            except InsufficientCredits:
                with lock:
                    results["refused"] += 1
            else:
                with lock:
                    results["ok"] += 1
                    results["tokens"] += tokens
            try:
                # A retried call (same key) must change nothing after its first success.
                with account_context(account):
                    credits_debit(account=account, tokens=3, key=f"retry-{n}", kind="chat")
            except InsufficientCredits:
                pass

    errors = run_at_once(spender, SPENDERS)
    assert errors == []
    with account_context(account):
        balance = balance_get(account=account)
        ledger_sum = CreditLedgerEntry.objects.for_account(account).aggregate(s=Sum("delta"))["s"]
        retries = CreditLedgerEntry.objects.for_account(account).filter(idempotency_key__startswith="retry-").count()
    assert balance >= 0
    assert ledger_sum == balance
    assert results["refused"] > 0, "the test should drive the account to its limit"
    assert results["ok"] + results["refused"] == SPENDERS * OPS
    # Every successful spend is accounted for exactly: 1500 - spent - one retry key per spender.
    assert balance == 1500 - results["tokens"] - 3 * retries
    assert retries <= SPENDERS
