"""Row-level security for tenant tables, created by migrations through one helper.

Every tenant-owned table gets RLS ENABLEd and FORCEd (so the owning role obeys it too) and
the policy `tenant_isolation`: a row is visible and writable only when its account_id is
the transaction's account (no context: no rows), or inside the audited bypass.
`accounts.tests.test_rls_coverage` fails if any table with an account_id column lacks it.

The context is signed. Any role may set any `app.*` setting, so a
policy that trusted `current_setting('app.account_id')` would let SQL injected into the
app's own connection read another account by setting it. The app therefore writes, with
the context, `app.context_sig` = SHA-256(k || SHA-256(k || fields)) under a key `k`
derived from SECRET_KEY, and policies read the context only through the functions of the
schema `groundwork_private`, which check that signature against their copy of the key (a
table the app's role cannot read; owned, like the tables, by the schema's owner role,
which the app's role cannot become; see core/db_owner.py). A changed setting without the
matching signature reads as "no context": no rows.
"""

from __future__ import annotations

from django.db import migrations

# The principal of the transaction, as SQL expressions (NULL when unset or unsigned).
# Policies and SECURITY DEFINER functions use these, never current_setting() themselves.
# Each is a scalar subquery, so PostgreSQL checks the signature once per statement (an
# InitPlan), not once per row.
CTX_ACCOUNT_ID = "(SELECT groundwork_private.ctx_account_id())"
CTX_USER_ID = "(SELECT groundwork_private.ctx_user_id())"
CTX_API_KEY_ID = "(SELECT groundwork_private.ctx_api_key_id())"
CTX_API_KEY_HASH = "(SELECT groundwork_private.ctx_api_key_hash())"
BYPASS = "(SELECT groundwork_private.ctx_bypass())"
ACCOUNT_MATCH = f"account_id = {CTX_ACCOUNT_ID}"
TENANT_POLICY = f"({ACCOUNT_MATCH} OR {BYPASS})"

# The fields, in signing order, as the app sets them (core.tenancy) and the database reads them.
CONTEXT_FIELDS = ("app.account_id", "app.user_id", "app.api_key_id", "app.api_key_hash", "app.bypass_rls")
_FIELDS_SQL = ", ".join(f"coalesce(current_setting('{name}', true), '')" for name in CONTEXT_FIELDS)
_SIGNED = "groundwork_private.ctx_signed()"

# Idempotent: every enable_rls() emits it first, so a table's policy never names a function
# that does not exist yet, whatever order the apps' migrations run in.
CONTEXT_SQL = f"""
CREATE SCHEMA IF NOT EXISTS groundwork_private;
CREATE TABLE IF NOT EXISTS groundwork_private.context_key (
    id integer PRIMARY KEY CHECK (id = 1),
    secret bytea NOT NULL CHECK (length(secret) >= 32)
);
REVOKE ALL ON groundwork_private.context_key FROM PUBLIC;
GRANT USAGE ON SCHEMA groundwork_private TO PUBLIC;
CREATE OR REPLACE FUNCTION groundwork_private.ctx_signed() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(bool_or(encode(sha256(k.secret || sha256(k.secret || convert_to(
               concat_ws('|', {_FIELDS_SQL}), 'UTF8'))), 'hex')
           = current_setting('app.context_sig', true)), false)
    FROM groundwork_private.context_key AS k
$fn$;
CREATE OR REPLACE FUNCTION groundwork_private.ctx_account_id() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE WHEN {_SIGNED} THEN NULLIF(current_setting('app.account_id', true), '')::bigint END
$fn$;
CREATE OR REPLACE FUNCTION groundwork_private.ctx_user_id() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE WHEN {_SIGNED} THEN NULLIF(current_setting('app.user_id', true), '')::bigint END
$fn$;
CREATE OR REPLACE FUNCTION groundwork_private.ctx_api_key_id() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE WHEN {_SIGNED} THEN NULLIF(current_setting('app.api_key_id', true), '')::bigint END
$fn$;
CREATE OR REPLACE FUNCTION groundwork_private.ctx_api_key_hash() RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE WHEN {_SIGNED} THEN NULLIF(current_setting('app.api_key_hash', true), '') END
$fn$;
CREATE OR REPLACE FUNCTION groundwork_private.ctx_bypass() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT coalesce(current_setting('app.bypass_rls', true), '') = 'on' AND {_SIGNED}
$fn$;
"""


def context_key_sql() -> tuple[str, list]:
    """The statement (run by the schema's owner: core.db_owner) that gives the database its
    copy of the signing key, derived from SECRET_KEY."""
    from core.tenancy import context_signing_key

    return (
        "INSERT INTO groundwork_private.context_key (id, secret) VALUES (1, %s)"
        " ON CONFLICT (id) DO UPDATE SET secret = EXCLUDED.secret",
        [context_signing_key()],
    )


def _enable_sql(table: str, extra_policies: dict[str, tuple[str, str]]) -> str:
    statements = [
        CONTEXT_SQL.strip().rstrip(";"),
        f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY',
        f'ALTER TABLE "{table}" FORCE ROW LEVEL SECURITY',
        f'DROP POLICY IF EXISTS tenant_isolation ON "{table}"',
        f'CREATE POLICY tenant_isolation ON "{table}" USING {TENANT_POLICY} WITH CHECK {TENANT_POLICY}',
    ]
    for name, (command, using) in extra_policies.items():
        statements.append(f'DROP POLICY IF EXISTS {name} ON "{table}"')
        statements.append(f'CREATE POLICY {name} ON "{table}" FOR {command} USING ({using})')
    return ";\n".join(statements) + ";"


def _disable_sql(table: str, extra_policies: dict[str, tuple[str, str]]) -> str:
    statements = [f'DROP POLICY IF EXISTS {name} ON "{table}"' for name in extra_policies]
    statements += [
        f'DROP POLICY IF EXISTS tenant_isolation ON "{table}"',
        f'ALTER TABLE "{table}" NO FORCE ROW LEVEL SECURITY',
        f'ALTER TABLE "{table}" DISABLE ROW LEVEL SECURITY',
    ]
    return ";\n".join(statements) + ";"


def enable_rls(table: str, *, extra_policies: dict[str, tuple[str, str]] | None = None):
    """A reversible migration operation that puts a tenant table under RLS.

    `extra_policies` adds narrow permissive policies, name -> (command, USING expression),
    e.g. a user reading their own memberships across accounts.
    """
    extra = extra_policies or {}
    return migrations.RunSQL(_enable_sql(table, extra), reverse_sql=_disable_sql(table, extra))


def append_only(table: str, *, trigger: str, function: str, what: str):
    """A migration operation that makes `table` append-only for every role, the app's
    included: a trigger refuses UPDATE and DELETE ("the <what> is append-only: ...")."""
    sql = f"""
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{what} is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER {trigger} BEFORE UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION {function}();
"""
    reverse = f"""
DROP TRIGGER IF EXISTS {trigger} ON {table};
DROP FUNCTION IF EXISTS {function}();
"""
    return migrations.RunSQL(sql, reverse_sql=reverse)
