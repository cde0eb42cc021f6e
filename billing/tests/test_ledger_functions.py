"""Each ledger operation is one SQL function (billing/migrations/0007), and the cases the
ORM twins used to answer are answered by it: a hold's draws when the hold was swept, a
draw whose key names another operation, a hold retried with its key, a budget looked up by
another account. Every entry the functions write keeps the ledger's sum equal to the balance."""

import pytest
from django.db import connection
from django.db.models import Sum

from accounts.tests.factories import add_member, make_user
from billing.budgets import BudgetNotFound, budget_access_by_id, budget_set
from billing.errors import IdempotencyConflict
from billing.models import CreditHold, CreditLedgerEntry, HoldStatus
from billing.selectors import balance_get
from billing.services import HoldDraw, credits_debit, credits_hold, hold_release, hold_settle
from core.errors import NotFound
from core.tenancy import account_context


@pytest.fixture
def acct(account_a):
    with account_context(account_a):
        yield account_a


def _consistent(account) -> int:
    balance = balance_get(account=account)
    assert CreditLedgerEntry.objects.for_account(account).aggregate(s=Sum("delta"))["s"] == balance
    return balance


def test_a_swept_holds_draws_are_charged_never_refused(acct):
    hold = credits_hold(account=acct, amount=500, key="turn")
    hold_release(hold=CreditHold.objects.for_account(acct).get(pk=hold.pk))  # the sweeper, meanwhile
    credits_debit(account=acct, tokens=balance_get(account=acct) - 30, key="drain", kind="chat")
    # The turn ends: its query embedding (50 credits) was made; the balance has 30.
    hold_release(hold=hold, draws=(HoldDraw(key="turn:query", kind="embedding", tokens=50),))
    entry = CreditLedgerEntry.objects.for_account(acct).get(idempotency_key="turn:query")
    assert (entry.delta, entry.tokens, entry.shortfall) == (-30, 50, 20)
    assert _consistent(acct) == 0
    assert hold.status == HoldStatus.RELEASED


def test_a_draw_whose_key_names_another_operation_writes_nothing(acct):
    credits_debit(account=acct, tokens=9, key="turn:query", kind="embedding")
    hold = credits_hold(account=acct, amount=500, key="turn")
    before = CreditLedgerEntry.objects.for_account(acct).count()
    with pytest.raises(IdempotencyConflict, match="turn:query"):
        hold_settle(hold=hold, used_tokens=100, draws=(HoldDraw(key="turn:query", kind="embedding", tokens=10),))
    assert CreditLedgerEntry.objects.for_account(acct).count() == before
    assert CreditHold.objects.for_account(acct).get(pk=hold.pk).status == HoldStatus.OPEN
    # The same draw again (a retried settle's) is recorded once.
    draw = HoldDraw(key="turn:query", kind="embedding", tokens=9)
    entry = hold_settle(hold=hold, used_tokens=100, draws=(draw,))
    assert hold_settle(hold=hold, used_tokens=100, draws=(draw,)).pk == entry.pk
    assert CreditLedgerEntry.objects.for_account(acct).filter(idempotency_key__startswith="turn:query").count() == 1
    assert _consistent(acct) == 10_000 - 9 - 100


def test_a_hold_retried_with_its_key_is_the_same_hold_in_one_statement(acct, django_assert_max_num_queries):
    with django_assert_max_num_queries(1):
        hold = credits_hold(account=acct, amount=300, key="h")
    assert hold.budget_free and CreditHold.objects.for_account(acct).get(pk=hold.pk).amount == 300
    assert credits_hold(account=acct, amount=300, key="h").pk == hold.pk
    with pytest.raises(IdempotencyConflict):
        credits_hold(account=acct, amount=301, key="h")
    with django_assert_max_num_queries(1):
        entry = hold_settle(hold=hold, used_tokens=120, model="m")
    assert (entry.delta, entry.tokens, entry.balance_after) == (-120, 120, _consistent(acct))


def test_the_functions_run_under_the_callers_row_level_security(account_a, account_b):
    with account_context(account_a):
        hold = credits_hold(account=account_a, amount=100, key="a-hold")
    with account_context(account_b):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT outcome FROM public.billing_hold_close(%s, %s, 'released', 0, 0, 'chat', '', '',"
                " '', '{}'::jsonb, '[]'::jsonb)",
                [account_b.pk, hold.pk],
            )
            assert cursor.fetchone()[0] == "missing"  # another account's hold is not there
    with account_context(account_a):
        assert CreditHold.objects.for_account(account_a).get(pk=hold.pk).status == HoldStatus.OPEN


def test_a_budget_is_found_by_id_only_in_its_account(account_a, account_b, owner_a):
    member = make_user("budgeted@a.test")
    add_member(account_a, member)
    with account_context(account_a):
        budget = budget_set(account=account_a, actor=owner_a, period="day", limit=100, user_id=member.pk)
        assert budget_access_by_id(account=account_a, budget_id=str(budget.pk)) == budget
        for malformed in ("x", None, 0, -1, 2**63, True):
            with pytest.raises(BudgetNotFound):
                budget_access_by_id(account=account_a, budget_id=malformed)
    with account_context(account_b), pytest.raises(NotFound) as missing:
        budget_access_by_id(account=account_b, budget_id=budget.pk)
    assert (missing.value.status, missing.value.code) == (404, "not_found")
