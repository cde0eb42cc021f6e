"""Budgets: caps per member and per API key per UTC day or month, enforced in the same
transaction as the hold or debit; who spent is on every hold and entry. Surfaces (chat,
search, upload) are in test_budget_surfaces.py, the races in test_budget_races.py."""

import datetime as dt
import itertools

import pytest
from django.db import connection

from accounts.models import Role
from accounts.services import api_key_create
from accounts.tests.factories import add_member, make_user
from audit.models import AuditEntry
from billing.budgets import Spender, budget_remove, budget_require, budget_set, budget_status_for
from billing.errors import BudgetExceeded, InsufficientCredits
from billing.models import Budget, CreditHold, CreditLedgerEntry
from billing.services import credits_debit, credits_hold, hold_release, hold_settle
from core.errors import GroundworkError
from core.tenancy import account_context

UTC = dt.UTC


@pytest.fixture
def member_a(account_a):
    return add_member(account_a, make_user("member@a.test"), role=Role.MEMBER)


def _key(account, name="integration"):
    with account_context(account):
        key, raw = api_key_create(account=account, actor=None, name=name)
    key.raw = raw
    return key


def _set(account, actor, **kwargs):
    with account_context(account):
        return budget_set(account=account, actor=actor, **kwargs)


# --- setting budgets ------------------------------------------------------------------------


def test_owner_sets_changes_and_removes_a_budget_with_audit(account_a, owner_a, member_a):
    budget = _set(account_a, owner_a, user_id=member_a.pk, period="day", limit="5,000")
    assert budget.limit == 5000 and budget.user == member_a and budget.api_key is None
    again = _set(account_a, owner_a, user_id=member_a.pk, period="day", limit=7000)
    assert again.pk == budget.pk and again.limit == 7000
    _set(account_a, owner_a, user_id=member_a.pk, period="month", limit=90000)
    with account_context(account_a):
        assert Budget.objects.for_account(account_a).count() == 2
        budget_remove(account=account_a, actor=owner_a, budget_id=budget.pk)
        assert list(Budget.objects.for_account(account_a).values_list("period", flat=True)) == ["month"]
        actions = list(
            AuditEntry.objects.for_account(account_a)
            .filter(action__startswith="budget.")
            .order_by("pk")
            .values_list("action", "target")
        )
    assert actions == [
        ("budget.set", "daily budget of member@a.test"),
        ("budget.set", "daily budget of member@a.test"),
        ("budget.set", "monthly budget of member@a.test"),
        ("budget.remove", "daily budget of member@a.test"),
    ]


@pytest.mark.parametrize(
    "kwargs, code",
    [
        ({"period": "day", "limit": "abc"}, "invalid_amount"),
        ({"period": "day", "limit": 0}, "invalid_amount"),
        ({"period": "day", "limit": -5}, "invalid_amount"),
        ({"period": "day", "limit": 10**13}, "invalid_amount"),
        ({"period": "week", "limit": 10}, "invalid_period"),
    ],
)
def test_bad_budgets_are_refused_with_a_clear_error(account_a, owner_a, member_a, kwargs, code):
    with pytest.raises(GroundworkError) as refused:
        _set(account_a, owner_a, user_id=member_a.pk, **kwargs)
    assert refused.value.code == code and refused.value.status == 400


def test_members_and_keys_cannot_set_budgets(account_a, owner_a, member_a):
    key = _key(account_a)
    for actor in (member_a, key):
        with pytest.raises(GroundworkError) as refused:
            _set(account_a, actor, user_id=owner_a.pk, period="day", limit=1)
        assert refused.value.status == 403 and refused.value.code == "forbidden"


def test_another_accounts_member_key_or_budget_is_not_found(account_a, account_b, owner_a, owner_b, member_a):
    key_a = _key(account_a)
    budget = _set(account_a, owner_a, user_id=member_a.pk, period="day", limit=10)
    for target in ({"user_id": member_a.pk}, {"api_key_id": key_a.pk}):
        with pytest.raises(GroundworkError) as refused:
            _set(account_b, owner_b, period="day", limit=10, **target)
        assert refused.value.status == 404
    with account_context(account_b), pytest.raises(GroundworkError) as refused:
        budget_remove(account=account_b, actor=owner_b, budget_id=budget.pk)
    assert refused.value.status == 404
    with account_context(account_b):
        assert budget_status_for(account=account_b, user=member_a) == []
    with account_context(account_a):
        assert Budget.objects.for_account(account_a).filter(pk=budget.pk).exists()


# --- enforcement ----------------------------------------------------------------------------


def test_a_hold_past_the_cap_is_refused_naming_it_and_writes_nothing(account_a, owner_a, member_a):
    _set(account_a, owner_a, user_id=member_a.pk, period="day", limit=5000)
    with account_context(account_a):
        credits_hold(account=account_a, amount=4980, key="h1", user=member_a)
        entries = CreditLedgerEntry.objects.for_account(account_a).count()
        with pytest.raises(BudgetExceeded) as refused:
            credits_hold(account=account_a, amount=100, key="h2", user=member_a)
        assert CreditLedgerEntry.objects.for_account(account_a).count() == entries
        assert not CreditHold.objects.for_account(account_a).filter(key="h2").exists()
    error = refused.value
    assert error.code == "budget_exceeded" and error.status == 402
    assert error.message == (
        "Your daily budget of 5,000 credits has 20 left today and this needs about 100; "
        f"it resets at 00:00 UTC. Ask an admin of {account_a.name} to raise it."
    )
    # Someone else in the account is not limited by the member's cap.
    with account_context(account_a):
        credits_hold(account=account_a, amount=100, key="h3", user=owner_a)


def test_open_holds_count_at_their_amount_settled_at_what_was_charged(account_a, owner_a, member_a):
    _set(account_a, owner_a, user_id=member_a.pk, period="month", limit=1000)
    with account_context(account_a):
        hold = credits_hold(account=account_a, amount=600, key="h1", user=member_a)
        assert budget_status_for(account=account_a, user=member_a)[0].spent == 600
        hold_settle(hold=hold, used_tokens=150)
        status = budget_status_for(account=account_a, user=member_a)[0]
        assert (status.spent, status.remaining, status.limit) == (150, 850, 1000)
        released = credits_hold(account=account_a, amount=800, key="h2", user=member_a)
        hold_release(hold=released)
        credits_debit(account=account_a, tokens=850, key="d1", kind="chat", user=member_a)
        with pytest.raises(
            BudgetExceeded,
            match=r"monthly budget of 1,000 credits is used up \(1,000 spent this "
            r"month\); it resets on 1 \w+ at 00:00 UTC",
        ):
            credits_debit(account=account_a, tokens=1, key="d2", kind="chat", user=member_a)


def test_settling_above_the_hold_passes_the_cap_then_the_next_hold_is_refused(account_a, owner_a, member_a):
    _set(account_a, owner_a, user_id=member_a.pk, period="day", limit=500)
    with account_context(account_a):
        hold = credits_hold(account=account_a, amount=400, key="h1", user=member_a)
        entry = hold_settle(hold=hold, used_tokens=700)  # the provider reported more than the worst case
        assert -entry.delta == 700 and entry.shortfall == 0
        assert budget_status_for(account=account_a, user=member_a)[0].spent == 700
        with pytest.raises(BudgetExceeded, match="is used up"):
            credits_hold(account=account_a, amount=1, key="h2", user=member_a)


def test_a_key_has_its_own_budget_and_never_spends_its_creators(account_a, owner_a):
    key = _key(account_a)
    _set(account_a, owner_a, api_key_id=key.pk, period="day", limit=50)
    _set(account_a, owner_a, user_id=owner_a.pk, period="day", limit=10_000)
    with account_context(account_a):
        hold = credits_hold(account=account_a, amount=40, key="k1", api_key=key, user=owner_a)
        assert (hold.spent_by_api_key_id, hold.spent_by_user_id) == (key.pk, None)
        with pytest.raises(BudgetExceeded, match="budget_exceeded: This API key's daily budget of 50 credits"):
            credits_debit(account=account_a, tokens=11, key="k2", kind="embedding", api_key=key)
        assert budget_status_for(account=account_a, user=owner_a)[0].spent == 0
        assert budget_status_for(account=account_a, api_key=key)[0].spent == 40


def test_the_balance_is_checked_before_the_budget(account_a, owner_a, member_a):
    _set(account_a, owner_a, user_id=member_a.pk, period="day", limit=10)
    with account_context(account_a), pytest.raises(InsufficientCredits):
        credits_hold(account=account_a, amount=10**6, key="big", user=member_a)


def test_retrying_a_hold_with_its_key_is_not_counted_twice(account_a, owner_a, member_a):
    _set(account_a, owner_a, user_id=member_a.pk, period="day", limit=100)
    with account_context(account_a):
        first = credits_hold(account=account_a, amount=100, key="once", user=member_a)
        assert credits_hold(account=account_a, amount=100, key="once", user=member_a).pk == first.pk


def test_every_hold_debit_release_and_charge_records_who_spent(account_a, owner_a, member_a):
    key = _key(account_a)
    with account_context(account_a):
        hold = credits_hold(account=account_a, amount=50, key="h", user=member_a)
        hold_settle(hold=hold, used_tokens=20)
        credits_debit(account=account_a, tokens=5, key="d", kind="embedding", api_key=key)
        credits_debit(account=account_a, tokens=5, key="sys", kind="embedding")
        rows = dict(CreditLedgerEntry.objects.for_account(account_a).values_list("idempotency_key", "spent_by_user_id"))
        keys = dict(
            CreditLedgerEntry.objects.for_account(account_a).values_list("idempotency_key", "spent_by_api_key_id")
        )
    assert rows["h"] == rows["h:release"] == rows["h:charge"] == member_a.pk
    assert keys["d"] == key.pk and rows["d"] is None
    assert rows["sys"] is None and keys["sys"] is None and rows["signup"] is None


# --- windows: explicit timestamps, no sleeping ----------------------------------------------

_ENTRY_NUMBERS = itertools.count(1)  # each inserted row's idempotency key is its own


def _spent_at(account, user, when: dt.datetime, credits: int):
    """A chat charge by `user` written at `when` (the ledger's created_at is set by the
    database otherwise; the table is append-only, so the row is inserted as it should be)."""
    n = next(_ENTRY_NUMBERS)
    with account_context(account), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO billing_creditledgerentry (account_id, delta, balance_after, kind, tokens, shortfall, model,"
            " provider, reference, idempotency_key, created_at, metadata, spent_by_user_id)"
            " VALUES (%s, %s, 0, 'chat', %s, 0, '', '', '', %s, %s, '{}', %s)",
            [account.pk, -credits, credits, f"at-{n}", when, user.pk],
        )


def test_daily_and_monthly_windows_are_utc_days_and_months(account_a, owner_a, member_a):
    _set(account_a, owner_a, user_id=member_a.pk, period="day", limit=1000)
    _set(account_a, owner_a, user_id=member_a.pk, period="month", limit=600)
    _spent_at(account_a, member_a, dt.datetime(2026, 1, 31, 23, 30, tzinfo=UTC), 100)
    _spent_at(account_a, member_a, dt.datetime(2026, 2, 1, 0, 30, tzinfo=UTC), 200)
    _spent_at(account_a, member_a, dt.datetime(2026, 2, 2, 10, 0, tzinfo=UTC), 300)

    def status(when):
        with account_context(account_a):
            return {
                s.period: (s.spent, s.remaining, s.resets_at)
                for s in budget_status_for(account=account_a, user=member_a, now=when)
            }

    assert status(dt.datetime(2026, 1, 31, 23, 59, tzinfo=UTC)) == {
        "day": (100, 900, dt.datetime(2026, 2, 1, tzinfo=UTC)),
        "month": (100, 500, dt.datetime(2026, 2, 1, tzinfo=UTC)),
    }
    assert status(dt.datetime(2026, 2, 1, 1, 0, tzinfo=UTC)) == {
        "day": (200, 800, dt.datetime(2026, 2, 2, tzinfo=UTC)),
        "month": (500, 100, dt.datetime(2026, 3, 1, tzinfo=UTC)),
    }
    noon = dt.datetime(2026, 2, 2, 12, 0, tzinfo=UTC)
    assert status(noon) == {
        "day": (300, 700, dt.datetime(2026, 2, 3, tzinfo=UTC)),
        "month": (500, 100, dt.datetime(2026, 3, 1, tzinfo=UTC)),
    }
    with account_context(account_a):
        budget_require(account=account_a, spender=Spender(user_id=member_a.pk), needed=100, now=noon)
        with pytest.raises(BudgetExceeded) as refused:
            budget_require(account=account_a, spender=Spender(user_id=member_a.pk), needed=101, now=noon)
    assert refused.value.message.startswith(
        "Your monthly budget of 600 credits has 100 left this month and this "
        "needs about 101; it resets on 1 March at 00:00 UTC."
    )
    with account_context(account_a):
        # December rolls over into January of the next year.
        december = budget_status_for(account=account_a, user=member_a, now=dt.datetime(2026, 12, 31, 20, tzinfo=UTC))
    assert {s.period: s.resets_at for s in december} == {
        "day": dt.datetime(2027, 1, 1, tzinfo=UTC),
        "month": dt.datetime(2027, 1, 1, tzinfo=UTC),
    }
