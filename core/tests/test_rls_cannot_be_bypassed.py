"""Row-level security holds against the app role's own SQL.

Each test connects with psycopg as the app role, exactly as the app does (the test
database, the same user), and plays an attacker who can run any SQL through an injection
while the app serves account A: whatever setting it changes, account B's rows stay unread.
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from accounts.tests.factories import make_api_key

pytestmark = pytest.mark.django_db(transaction=True)  # the attacker's own connection reads committed rows

TENANT_TABLES = ["accounts_membership", "accounts_apikey", "billing_accountbalance", "billing_creditledgerentry"]


def _app_role_connection() -> psycopg.Connection:
    s = connection.settings_dict
    return psycopg.connect(
        dbname=s["NAME"], user=s["USER"], host=s["HOST"] or None, port=s["PORT"] or None, password=s["PASSWORD"] or None
    )


def _rows_of(cursor, account_id: int) -> dict[str, int]:
    seen = {}
    for table in TENANT_TABLES:
        cursor.execute(f'SELECT count(*) FROM "{table}" WHERE account_id = %s', [account_id])
        seen[table] = cursor.fetchone()[0]
    return {table: n for table, n in seen.items() if n}


@pytest.fixture
def tenants(account_a, account_b):
    make_api_key(account_b)
    return account_a, account_b


def _as_app_serving(cursor, account) -> None:
    """What the app itself does for a request of `account` (the legitimate, signed context)."""
    from core.tenancy import _settings_values, _sign

    values = _settings_values(account_id=account.pk)
    cursor.execute(
        "SELECT set_config('app.account_id', %s, true), set_config('app.user_id', %s, true),"
        " set_config('app.api_key_id', %s, true), set_config('app.api_key_hash', %s, true),"
        " set_config('app.bypass_rls', %s, true), set_config('app.context_sig', %s, true)",
        [*values, _sign(values)],
    )


def test_the_app_role_is_plain(tenants):
    with _app_role_connection() as conn:
        row = conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").fetchone()
    assert row == (False, False)


def test_the_apps_own_context_sees_its_account_only(tenants):
    account_a, account_b = tenants
    with _app_role_connection() as conn, conn.cursor() as cursor:
        _as_app_serving(cursor, account_a)
        assert _rows_of(cursor, account_a.pk)
        assert _rows_of(cursor, account_b.pk) == {}


def _b_key_hash(account_b) -> str:
    from accounts.models import ApiKey
    from core.tenancy import account_context

    with account_context(account_b):
        return ApiKey.objects.for_account(account_b).values_list("key_hash", flat=True).first()


@pytest.mark.parametrize("local", [False, True], ids=["session", "transaction"])
@pytest.mark.parametrize(
    "trick", ["bypass", "account_id", "user_id", "api_key_hash", "everything", "replayed_signature"]
)
def test_no_setting_the_app_role_can_change_reads_another_account(tenants, trick, local):
    account_a, account_b = tenants
    guc = {
        "bypass": {"app.bypass_rls": "on"},
        "account_id": {"app.account_id": str(account_b.pk)},
        "user_id": {"app.user_id": str(account_b.test_owner.pk)},
        "api_key_hash": {"app.api_key_hash": _b_key_hash(account_b)},
        "everything": {
            "app.bypass_rls": "on",
            "app.account_id": str(account_b.pk),
            "app.api_key_id": "1",
            "app.user_id": str(account_b.test_owner.pk),
            "app.api_key_hash": _b_key_hash(account_b),
        },
        "replayed_signature": {"app.account_id": str(account_b.pk)},
    }[trick]
    with _app_role_connection() as conn, conn.cursor() as cursor:
        # The injection runs inside A's request: A's signed context is there to copy.
        _as_app_serving(cursor, account_a)
        for name, value in guc.items():
            cursor.execute("SELECT set_config(%s, %s, %s)", [name, value, local])
        # Any custom setting whose name the attacker could guess is theirs to set too.
        # (row_security = off only turns a filtered read into an error: see the test below.)
        for name in ("app.bypass", "app.rls_bypass", "app.superuser", "app.staff"):
            cursor.execute("SELECT set_config(%s, 'on', %s)", [name, local])
        assert _rows_of(cursor, account_b.pk) == {}
        # Nor can it read B's key by hash or B's owner's memberships.
        cursor.execute("SELECT count(*) FROM accounts_apikey WHERE key_hash = %s", [_b_key_hash(account_b)])
        assert cursor.fetchone()[0] == 0


def test_row_security_off_refuses_instead_of_reading(tenants):
    _, account_b = tenants
    with _app_role_connection() as conn, conn.cursor() as cursor:
        cursor.execute("SELECT set_config('row_security', 'off', false)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _rows_of(cursor, account_b.pk)


def test_the_signature_is_not_in_other_sessions_activity(tenants):
    """The signature travels as a bound parameter: another session of the same role (all an
    attacker can watch in pg_stat_activity) never sees it in a query text."""
    from core.tenancy import account_context

    account_a, _ = tenants
    with account_context(account_a):
        with _app_role_connection() as spy:
            texts = [
                row[0]
                for row in spy.execute(
                    "SELECT query FROM pg_stat_activity WHERE pid = %s", [connection.connection.info.backend_pid]
                )
            ]
    assert texts and all("context_sig" not in text or "$" in text for text in texts)


@pytest.mark.parametrize(
    "statement",
    [
        "SET ROLE groundwork_search",
        "SELECT set_config('role', 'groundwork_search', false)",
        "SET ROLE groundwork_owner",
        "SELECT secret FROM groundwork_private.context_key",
        "UPDATE groundwork_private.context_key SET secret = decode(repeat('00', 32), 'hex')",
        "CREATE OR REPLACE FUNCTION groundwork_private.ctx_signed() RETURNS boolean LANGUAGE sql AS 'SELECT true'",
        "CREATE FUNCTION public.sha256(bytea) RETURNS bytea LANGUAGE sql AS 'SELECT $1'",
        "ALTER TABLE documents_chunk OWNER TO groundwork",
        "CREATE INDEX evil ON documents_chunk (id)",
        "ALTER TABLE accounts_membership NO FORCE ROW LEVEL SECURITY",
        "ALTER TABLE accounts_membership DISABLE ROW LEVEL SECURITY",
        "DROP POLICY tenant_isolation ON accounts_membership",
    ],
)
def test_no_role_or_table_change_is_open_to_the_app_role(tenants, statement):
    with _app_role_connection() as conn, conn.cursor() as cursor:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            cursor.execute(statement)


def test_every_policy_on_a_tenant_table_requires_the_signed_context(tenants):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, policyname, coalesce(qual, '') || coalesce(with_check, '')"
            " FROM pg_policies WHERE schemaname = 'public'"
        )
        policies = cursor.fetchall()
    assert policies
    unsigned = [(t, p) for t, p, expr in policies if "groundwork_private.ctx_" not in expr or "current_setting" in expr]
    assert unsigned == []
    # The SECURITY DEFINER search function (it skips RLS to use its GIN index) reads the
    # signed context too, never a setting.
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = 'chunk_fulltext_search'")
        (source,) = cursor.fetchone()
    assert "groundwork_private.ctx_account_id()" in source and "current_setting" not in source


def test_full_text_search_answers_only_the_signed_account(tenants):
    """The search function bypasses RLS for its index: a forged account setting gets nothing."""
    from core.tenancy import dangerously_bypass_tenancy
    from documents.models import Chunk, Document, Status

    account_a, account_b = tenants
    from documents.services import collection_default_ensure

    with dangerously_bypass_tenancy(reason="test: account B's private chunk"):
        general = collection_default_ensure(account=account_b)
        document = Document.all_accounts.create(
            account=account_b,
            collection=general,
            name="b.txt",
            kind="text",
            content_type="text/plain",
            size=1,
            sha256="b" * 64,
            status=Status.READY,
            chunk_count=1,
        )
        Chunk.all_accounts.create(
            account=account_b,
            document=document,
            collection=general,
            revision=1,
            chunk_index=0,
            token_count=3,
            content="the merger codename is bluebird",
            embedding=[0.05] * 384,
            embedding_model="synthetic",
        )
    query = "SELECT count(*) FROM chunk_fulltext_search(%s, 'bluebird', 10)"
    with _app_role_connection() as conn, conn.cursor() as cursor:
        _as_app_serving(cursor, account_b)
        cursor.execute(query, [account_b.pk])
        assert cursor.fetchone()[0] == 1  # B's own signed context finds it
    with _app_role_connection() as conn, conn.cursor() as cursor:
        _as_app_serving(cursor, account_a)
        cursor.execute("SELECT set_config('app.account_id', %s, true)", [str(account_b.pk)])
        cursor.execute(query, [account_b.pk])
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT groundwork_private.ctx_account_id()")
        assert cursor.fetchone()[0] is None
