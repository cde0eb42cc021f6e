"""Many concurrent spenders of one member or one key never pass its cap: the budget check
runs under the account's balance row lock, in the same transaction as the hold or debit,
with real transactions on separate connections."""

import random
import threading

import pytest
from django.db.models import Sum

from accounts.models import Role
from accounts.services import account_create, api_key_create
from accounts.tests.factories import add_member, make_user
from billing.budgets import budget_set, budget_status_for
from billing.errors import BudgetExceeded
from billing.models import CreditHold, CreditLedgerEntry, HoldStatus
from billing.services import credits_debit, credits_hold, hold_release, hold_settle
from billing.tests.threads import run_at_once
from core.tenancy import account_context

SPENDERS = 12
OPS = 30
CAP = 2_000


def _race(spend, spenders=SPENDERS):
    """Run `spend(n, i)` OPS times in each of `spenders` threads started together; count
    successes (credits) and refusals."""
    results = {"credits": 0, "refused": 0}
    lock = threading.Lock()

    def spender(n):
        rng = random.Random(n)
        for i in range(OPS):
            amount = rng.randint(5, 60)
            try:
                spent = spend(n, i, amount)
            except BudgetExceeded:
                with lock:
                    results["refused"] += 1
            else:
                with lock:
                    results["credits"] += spent

    errors = run_at_once(spender, spenders)
    assert errors == []
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_holds_of_one_member_never_exceed_the_daily_cap():
    owner = make_user()
    account = account_create(name="Racing", owner=owner, initial_credits=1_000_000)
    member = add_member(account, role=Role.MEMBER)
    bystander = add_member(account, role=Role.MEMBER)
    with account_context(account):
        budget_set(account=account, actor=owner, user_id=member.pk, period="day", limit=CAP)

    def spend(n, i, amount):
        with account_context(account, user=member):
            hold = credits_hold(account=account, amount=amount, key=f"h-{n}-{i}", user=member)
        # Half are settled below what they held, a few released, the rest stay open: each
        # way the cap must hold, counting open holds at their amount.
        with account_context(account):
            if i % 4 == 0:
                hold_release(hold=hold)
                return 0
            if i % 2 == 0:
                hold_settle(hold=hold, used_tokens=amount // 2)
                return amount // 2
        return amount

    results = _race(spend)
    # Somebody else in the account spends freely meanwhile: not limited by the member's cap.
    with account_context(account):
        credits_debit(account=account, tokens=5_000, key="bystander", kind="chat", user=bystander)
        status = budget_status_for(account=account, user=member)[0]
        charged = -(
            CreditLedgerEntry.objects.for_account(account)
            .filter(spent_by_user=member, kind="chat")
            .aggregate(s=Sum("delta"))["s"]
            or 0
        )
        held = (
            CreditHold.objects.for_account(account)
            .filter(spent_by_user=member, status=HoldStatus.OPEN)
            .aggregate(s=Sum("amount"))["s"]
            or 0
        )
    assert results["refused"] > 0, "the race should drive the member to the cap"
    assert status.spent == charged + held == results["credits"]
    assert status.spent <= CAP
    # Refusals only when the cap was nearly reached (no spurious refusals from a bad sum).
    assert status.spent > CAP - 60


@pytest.mark.django_db(transaction=True)
def test_concurrent_debits_and_holds_of_one_key_never_exceed_the_monthly_cap():
    owner = make_user()
    account = account_create(name="Keyed", owner=owner, initial_credits=1_000_000)
    with account_context(account):
        key, _ = api_key_create(account=account, actor=None, name="batch job")
        budget_set(account=account, actor=owner, api_key_id=key.pk, period="month", limit=CAP)

    def spend(n, i, amount):
        with account_context(account, api_key=key):
            if i % 2:
                credits_debit(account=account, tokens=amount, key=f"d-{n}-{i}", kind="embedding", api_key=key)
            else:
                credits_hold(account=account, amount=amount, key=f"h-{n}-{i}", api_key=key)
        return amount

    results = _race(spend, spenders=16)
    with account_context(account):
        status = budget_status_for(account=account, api_key=key)[0]
    assert results["refused"] > 0
    assert status.spent == results["credits"] and CAP - 60 < status.spent <= CAP
