"""account_context(flush=False): that one transaction's commit does not wait for the disk;
nothing else changes (the next transaction, a nested context, the pooled connection)."""

import pytest
from django.db import connection

from core.tenancy import account_context

pytestmark = pytest.mark.django_db(transaction=True)


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def test_flush_false_is_this_transaction_only(account_a):
    with account_context(account_a, flush=False):
        assert _synchronous_commit() == "off"
        with account_context(account_a):  # nested: part of the outer transaction, unchanged
            assert _synchronous_commit() == "off"
        assert _synchronous_commit() == "off"
    with account_context(account_a):
        assert _synchronous_commit() == "on"
    assert _synchronous_commit() == "on"


def test_a_nested_context_cannot_turn_its_outer_commit_asynchronous(account_a):
    with account_context(account_a):
        with account_context(account_a, flush=False):
            assert _synchronous_commit() == "on"
        assert _synchronous_commit() == "on"
