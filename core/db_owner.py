"""The schema's owner: a database role apart from the app's.

The app serves requests as a plain role (NOSUPERUSER NOBYPASSRLS) that owns nothing: it
cannot ALTER a table out of row-level security, drop a policy, read the context-signing
key or become a role that bypasses RLS. Migrations, the signing key and the per-account
search indexes are the owner's: `manage.py migrate` (core/management/commands/migrate.py)
runs as `DATABASE_OWNER_URL`'s role and then grants the app's role the rows, never the
schema. With no owner configured (a deployment that gave only DATABASE_URL) everything
runs as the one role, as before: correct and isolated by the signed context, without the
second line against an injection that alters tables (docs/operations/postgresql.md).
"""

from __future__ import annotations

import contextlib
import time

import psycopg
from django.conf import settings
from django.db import connections

from core.rls import CONTEXT_SQL, context_key_sql


def owner_credentials() -> dict | None:
    """{"USER", "PASSWORD"} of the owner role, or None when the app's role is the owner."""
    owner = settings.DATABASE_OWNER
    if not owner or owner["USER"] == settings.DATABASE_APP_USER:
        return None
    return owner


def login_as_owner(alias: str = "default"):
    """Log Django's `alias` connection in as the owner; returns the function that logs it
    back in as the app (a no-op pair when there is no separate owner)."""
    owner = owner_credentials()
    conn = connections[alias]
    if owner is None or conn.settings_dict["USER"] == owner["USER"]:
        return lambda: None
    saved = {key: conn.settings_dict.get(key) for key in ("USER", "PASSWORD")}
    _close_with_pool(conn)
    conn.settings_dict.update(owner)

    def back_to_app():
        _close_with_pool(conn)
        conn.settings_dict.update(saved)

    return back_to_app


def _close_with_pool(conn) -> None:
    """Close the connection and its process's pool (settings.DATABASE_POOL_MAX_SIZE): a pool
    keeps the credentials it was opened with, so switching roles needs a new one."""
    conn.close()
    if conn.settings_dict["OPTIONS"].get("pool"):
        conn.close_pool()


@contextlib.contextmanager
def as_database_owner(alias: str = "default"):
    """Run the block with Django's `alias` connection logged in as the owner (migrations,
    creating the test database). The app's credentials are back afterwards."""
    back_to_app = login_as_owner(alias)
    try:
        yield connections[alias]
    finally:
        back_to_app()


@contextlib.contextmanager
def owner_connection(alias: str = "default"):
    """A psycopg connection of its own (autocommit), as the owner, on the database the app
    uses now (the test database in tests): for DDL outside the app's transaction, such as
    CREATE INDEX CONCURRENTLY."""
    s = connections[alias].settings_dict
    owner = owner_credentials() or {"USER": s["USER"], "PASSWORD": s["PASSWORD"]}
    with psycopg.connect(
        dbname=s["NAME"],
        host=s["HOST"] or None,
        port=s["PORT"] or None,
        user=owner["USER"],
        password=owner["PASSWORD"] or None,
        autocommit=True,
    ) as conn:
        yield conn


# One number for "the schema is being changed", per database (advisory locks are).
MIGRATION_LOCK = 7_354_221_001


@contextlib.contextmanager
def migration_lock(alias: str = "default"):
    """Hold the database's migration lock for the block: nodes started together run
    `migrate` one after another (the later ones find nothing left to do) instead of
    colliding in the catalog ("tuple concurrently updated", "relation already exists").

    A session lock on a connection of its own: Django's migrations commit as they go and may
    reconnect, and a transaction-level lock would end with the first of them."""
    with owner_connection(alias) as conn:
        # NOTE: polled, never a blocking pg_advisory_lock: a node waiting inside a statement
        # holds a snapshot, and the holder's CREATE INDEX CONCURRENTLY waits for every older
        # snapshot to end: a deadlock PostgreSQL cannot see.
        while not conn.execute("SELECT pg_try_advisory_lock(%s)", [MIGRATION_LOCK]).fetchone()[0]:
            time.sleep(0.5)
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK])


def context_install(conn) -> None:
    """Before migrating: the signed-context schema and the database's copy of the key (a
    data migration that needs the audited bypass can then use it)."""
    sql, params = context_key_sql()
    with conn.cursor() as cursor:
        cursor.execute(CONTEXT_SQL)
        cursor.execute(sql, params)


def app_role_grant(conn) -> None:
    """After migrating: the app's role may read and write rows (under RLS), nothing else.
    Tests also get TRUNCATE, which pytest's flush between transactional tests needs."""
    app_role = settings.DATABASE_APP_USER
    if owner_credentials() is None:
        return
    quoted = conn.ops.quote_name(app_role)
    table_rights = "SELECT, INSERT, UPDATE, DELETE" + (", TRUNCATE" if settings.TESTING else "")
    with conn.cursor() as cursor:
        cursor.execute(f"REVOKE CREATE ON SCHEMA public FROM {quoted}")
        cursor.execute(f"GRANT USAGE ON SCHEMA public TO {quoted}")
        cursor.execute(f"GRANT {table_rights} ON ALL TABLES IN SCHEMA public TO {quoted}")
        cursor.execute(f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {quoted}")
        cursor.execute(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {quoted}")
