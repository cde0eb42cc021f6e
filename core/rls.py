"""Row-level security for tenant tables, created by migrations through one helper.

Every tenant-owned table gets RLS ENABLEd and FORCEd (so the owning role obeys it too) and
the policy `tenant_isolation`: a row is visible and writable only when its account_id is
the transaction's `app.account_id` (no setting: no rows), or inside the audited bypass.
`accounts.tests.test_rls_coverage` fails if any table with an account_id column lacks it.
"""
from __future__ import annotations

from django.db import migrations

# The principal of the transaction, as SQL expressions (NULL when unset). Policies and
# SECURITY DEFINER functions use these names, never current_setting() themselves.
CTX_ACCOUNT_ID = "NULLIF(current_setting('app.account_id', true), '')::bigint"
CTX_USER_ID = "NULLIF(current_setting('app.user_id', true), '')::bigint"
CTX_API_KEY_ID = "NULLIF(current_setting('app.api_key_id', true), '')::bigint"
ACCOUNT_MATCH = f"account_id = {CTX_ACCOUNT_ID}"
BYPASS = "current_setting('app.bypass_rls', true) = 'on'"
TENANT_POLICY = f"({ACCOUNT_MATCH} OR {BYPASS})"


def _enable_sql(table: str, extra_policies: dict[str, tuple[str, str]]) -> str:
    statements = [
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
