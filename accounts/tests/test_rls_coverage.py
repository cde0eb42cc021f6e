"""The database lock must exist on every tenant table, and the tests must not skip it."""

from django.db import connection


def test_connection_role_is_neither_superuser_nor_bypassrls(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
        rolsuper, rolbypassrls = cursor.fetchone()
    assert rolsuper is False, "tests connect as a superuser: RLS would be skipped and prove nothing"
    assert rolbypassrls is False, "tests connect with BYPASSRLS: RLS would be skipped and prove nothing"


def test_tests_run_as_the_apps_role_not_the_owner(db, settings):
    """The owner logs in to make the test database; the pool must not keep its connections."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        assert cursor.fetchone()[0] == settings.DATABASE_APP_USER


def test_every_table_with_account_id_has_forced_rls_and_a_policy(db):
    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
                   (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'tenant_isolation')
            FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'account_id' AND NOT a.attisdropped
            WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
        """)
        tables = cursor.fetchall()
    assert tables, "expected tenant tables with an account_id column"
    missing = [name for name, enabled, forced, policies in tables if not (enabled and forced and policies)]
    assert missing == [], f"tables with account_id but without forced RLS + tenant_isolation policy: {missing}"
