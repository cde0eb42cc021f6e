"""Project-wide fixtures. The database is the real PostgreSQL (app role, RLS on)."""
import pytest

from accounts.tests.factories import make_account, make_user


@pytest.fixture
def account_a(db):
    return make_account("Acme", owner_email="owner@acme.test")


@pytest.fixture
def account_b(db):
    return make_account("Beta", owner_email="owner@beta.test")


@pytest.fixture
def owner_a(account_a):
    return account_a.test_owner


@pytest.fixture
def owner_b(account_b):
    return account_b.test_owner


@pytest.fixture
def client_a(client, owner_a):
    client.force_login(owner_a)
    return client
