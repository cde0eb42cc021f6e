"""Both locks: the ORM refuses unscoped queries, and PostgreSQL RLS enforces the account."""

import pytest
from django.db import ProgrammingError, connection, transaction

from accounts.models import ApiKey, Invitation, Membership
from accounts.tests.factories import add_member, make_api_key
from core.tenancy import (
    UnscopedQueryError,
    account_context,
    current_account_id,
    dangerously_bypass_tenancy,
)


def _count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
        return cursor.fetchone()[0]


@pytest.fixture
def two_tenants(account_a, account_b):
    add_member(account_a)
    add_member(account_a)
    make_api_key(account_a)
    add_member(account_b)
    return account_a, account_b


def test_orm_manager_fails_closed_without_an_account(two_tenants):
    with pytest.raises(UnscopedQueryError):
        list(Membership.objects.all())
    with pytest.raises(UnscopedQueryError):
        Membership.objects.filter(role="owner")
    with pytest.raises(UnscopedQueryError):
        Membership.objects.for_account(None)


def test_orm_account_b_sees_nothing_of_a(two_tenants):
    a, b = two_tenants
    with account_context(b):
        rows = list(Membership.objects.for_account(b))
        assert {m.account_id for m in rows} == {b.pk}
        assert len(rows) == 2
        # Asking for A's rows by name while acting for B: the database still says no.
        assert Membership.objects.for_account(a).count() == 0
        assert ApiKey.objects.for_account(a).count() == 0


def test_raw_sql_counts_only_the_context_account(two_tenants):
    a, b = two_tenants
    with account_context(a):
        assert _count("accounts_membership") == 3
        assert _count("accounts_apikey") == 1
    with account_context(b):
        assert _count("accounts_membership") == 2
        assert _count("accounts_apikey") == 0


def test_raw_sql_without_context_counts_zero(two_tenants):
    assert current_account_id() is None
    with transaction.atomic():
        assert _count("accounts_membership") == 0
        assert _count("accounts_apikey") == 0
        assert _count("accounts_invitation") == 0


def test_inserting_a_row_for_b_inside_a_context_is_refused(two_tenants):
    a, b = two_tenants
    with account_context(a):
        with pytest.raises(ProgrammingError, match="row-level security"):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO accounts_invitation (account_id, email, role, created_at) "
                    "VALUES (%s, 'x@evil.test', 'member', now())",
                    [b.pk],
                )


def test_updating_b_rows_inside_a_context_changes_nothing(two_tenants):
    a, b = two_tenants
    with account_context(a), connection.cursor() as cursor:
        cursor.execute("UPDATE accounts_membership SET role = 'owner' WHERE account_id = %s", [b.pk])
        assert cursor.rowcount == 0


def test_context_is_transaction_local_and_reset(two_tenants):
    a, b = two_tenants
    with account_context(a):
        with account_context(b):
            assert current_account_id() == b.pk
            assert _count("accounts_membership") == 2
        assert current_account_id() == a.pk
        assert _count("accounts_membership") == 3
    assert current_account_id() is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('app.account_id', true)")
        assert cursor.fetchone()[0] in (None, "")


def test_context_is_reset_after_an_exception(two_tenants):
    a, b = two_tenants
    with account_context(a):
        with pytest.raises(RuntimeError):
            with account_context(b):
                raise RuntimeError("boom")
        assert current_account_id() == a.pk
        assert _count("accounts_membership") == 3
    assert current_account_id() is None


def test_bypass_sees_every_account_and_is_explicit(two_tenants, caplog):
    with dangerously_bypass_tenancy(reason="test: support report"):
        assert Membership.all_accounts.count() == 5
    assert "support report" in caplog.text
    with pytest.raises(ValueError):
        with dangerously_bypass_tenancy(reason=""):
            pass


def test_all_accounts_manager_without_bypass_reads_nothing(two_tenants):
    with transaction.atomic():
        assert Membership.all_accounts.count() == 0


def test_account_context_requires_an_account():
    with pytest.raises(UnscopedQueryError):
        account_context(None)


def test_invitation_rows_isolated(two_tenants, owner_a):
    a, b = two_tenants
    with account_context(a):
        Invitation.objects.for_account(a).create(account=a, email="new@x.test", invited_by=owner_a)
    with account_context(b):
        assert Invitation.objects.for_account(b).count() == 0
        assert _count("accounts_invitation") == 0
