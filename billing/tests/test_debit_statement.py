"""A debit is one statement (billing_debit) and keeps every guarantee of the
ledger: never below zero, once per key however many spenders retry it at the same time,
only in the context's own account, and the entry it returns is the row that was written."""

import threading

import pytest
from django.db import ProgrammingError, transaction
from django.db.models import Sum

from accounts.services import account_create
from accounts.tests.factories import make_user
from billing.errors import InsufficientCredits
from billing.models import CreditLedgerEntry
from billing.selectors import balance_get
from billing.services import credits_debit
from billing.tests.threads import run_at_once
from core.tenancy import account_context

SPENDERS = 8


def _in_threads(work) -> list:
    """Run work(n) in SPENDERS threads started together; the exceptions they raised."""
    return run_at_once(work, SPENDERS)


def _ledger(account):
    with account_context(account):
        entries = CreditLedgerEntry.objects.for_account(account)
        return balance_get(account=account), entries.aggregate(s=Sum("delta"))["s"], entries


@pytest.mark.django_db(transaction=True)
def test_eight_spenders_draining_one_account_stop_exactly_at_zero():
    account = account_create(name="Drained", owner=make_user(), initial_credits=1000)
    outcomes = {"charged": 0, "refused": 0}
    lock = threading.Lock()

    def work(n):
        for i in range(30):
            try:
                with account_context(account):
                    credits_debit(account=account, tokens=7, key=f"d-{n}-{i}", kind="chat")
                outcome = "charged"
            except InsufficientCredits:
                outcome = "refused"
            with lock:
                outcomes[outcome] += 1

    assert _in_threads(work) == []
    balance, ledger_sum, _ = _ledger(account)
    # 1000 credits buy 142 debits of 7; every other one is refused, none half-written.
    assert outcomes == {"charged": 142, "refused": SPENDERS * 30 - 142}
    assert balance == ledger_sum == 1000 - 142 * 7 == 6


@pytest.mark.django_db(transaction=True)
def test_the_same_keys_sent_by_eight_spenders_at_once_are_charged_once():
    account = account_create(name="Retried", owner=make_user(), initial_credits=1000)
    seen = [dict() for _ in range(SPENDERS)]

    def work(n):
        for i in range(20):
            with account_context(account):
                entry = credits_debit(account=account, tokens=5, key=f"turn-{i}", kind="chat")
            seen[n][i] = entry.pk

    assert _in_threads(work) == []
    balance, ledger_sum, entries = _ledger(account)
    assert balance == ledger_sum == 1000 - 20 * 5
    with account_context(account):
        assert entries.filter(idempotency_key__startswith="turn-").count() == 20
    assert all(s == seen[0] for s in seen), "every retry answers with the entry that was written"


@pytest.mark.django_db(transaction=True)
def test_eight_spenders_on_eight_accounts_each_keep_their_own_ledger():
    accounts = [account_create(name=f"Team {n}", owner=make_user(), initial_credits=400) for n in range(SPENDERS)]

    def work(n):
        for i in range(50):
            with account_context(accounts[n]):
                credits_debit(account=accounts[n], tokens=n + 1, key=f"d-{i}", kind="embedding")

    assert _in_threads(work) == []
    for n, account in enumerate(accounts):
        balance, ledger_sum, _ = _ledger(account)
        assert balance == ledger_sum == 400 - 50 * (n + 1)


def test_account_b_cannot_debit_account_a(account_a, account_b):
    with account_context(account_b):
        with pytest.raises(ProgrammingError, match="row-level security"):
            with transaction.atomic():
                credits_debit(account=account_a, tokens=10, key="sneaky", kind="chat")
    balance, ledger_sum, entries = _ledger(account_a)
    assert balance == ledger_sum == 10000
    with account_context(account_a):
        assert not entries.filter(idempotency_key="sneaky").exists()


def test_a_debit_is_one_statement_and_returns_the_row_it_wrote(account_a, owner_a, django_assert_max_num_queries):
    with account_context(account_a):
        with django_assert_max_num_queries(1):
            entry = credits_debit(
                account=account_a,
                tokens=42,
                key="chat:1",
                kind="chat",
                model="m",
                provider="p",
                reference="message:1",
                metadata={"turn": 1},
                user=owner_a,
            )
        stored = CreditLedgerEntry.objects.for_account(account_a).get(idempotency_key="chat:1")
    fields = [f.attname for f in CreditLedgerEntry._meta.concrete_fields]
    assert [getattr(entry, f) for f in fields] == [getattr(stored, f) for f in fields]
    assert (stored.delta, stored.balance_after, stored.spent_by_user_id) == (-42, 10000 - 42, owner_a.pk)
