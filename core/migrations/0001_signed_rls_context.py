"""Row-level security reads a signed context (core/rls.py).

Re-creates every tenant policy of the apps' earlier migrations through the signed-context
functions, and the full-text search function with them; a database migrated before this
one had policies that trusted `app.*` settings any role can change. A fresh database gets
the signed policies from `core.rls.enable_rls` already; re-creating them is harmless.
"""

from django.db import migrations

from core.rls import CONTEXT_SQL, CTX_API_KEY_HASH, CTX_USER_ID, enable_rls

TENANT_TABLES = [
    "accounts_invitation",
    "billing_accountbalance",
    "billing_creditledgerentry",
    "billing_credithold",
    "chat_conversation",
    "chat_message",
    "documents_document",
    "documents_chunk",
    "documents_embeddingbatch",
    "documents_reindexrun",
    "audit_auditentry",
]

INVITEE_READ = f"""
DROP POLICY IF EXISTS invitation_invitee_read ON "accounts_invitation";
CREATE POLICY invitation_invitee_read ON "accounts_invitation" FOR SELECT USING (
  accepted_at IS NULL AND lower(email) = (
    SELECT lower(u.email) FROM accounts_user u
    WHERE u.id = {CTX_USER_ID} AND u.email_verified_at IS NOT NULL))
"""


def _fulltext_function_sql() -> str:
    """A database made before the signed context has the search function reading
    `app.account_id` itself: replace it (documents 0003's current text). A later migration
    may already have replaced it with its own signed version: then leave that one."""
    from importlib import import_module

    search = import_module("documents.migrations.0003_search")
    body = f"DROP FUNCTION IF EXISTS {search.SIGNATURE};\n" + search.CREATE_FUNCTION
    return f"""
DO $outer$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'chunk_fulltext_search'
               AND prosrc LIKE '%current_setting(''app.account_id''%') THEN
        EXECUTE {_dollar_quote(body)};
    END IF;
END
$outer$;
"""


def _dollar_quote(text: str) -> str:
    assert "$body$" not in text
    return f"$body${text}$body$"


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_invitations_verified_email"),
        ("audit", "0001_initial"),
        ("billing", "0003_grant_credits_permission"),
        ("chat", "0004_message_query"),
        ("documents", "0004_document_credits_estimate"),
    ]

    operations = [
        migrations.RunSQL(CONTEXT_SQL, reverse_sql=migrations.RunSQL.noop),
        # Re-created in place: undoing this migration must not take RLS off a table.
        migrations.RunSQL(
            enable_rls(
                "accounts_membership",
                extra_policies={
                    "membership_self_read": ("SELECT", f"user_id = {CTX_USER_ID}"),
                },
            ).sql,
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.RunSQL(
            enable_rls(
                "accounts_apikey",
                extra_policies={
                    "apikey_by_hash": ("SELECT", f"key_hash = {CTX_API_KEY_HASH}"),
                },
            ).sql,
            reverse_sql=migrations.RunSQL.noop,
        ),
        *[migrations.RunSQL(enable_rls(table).sql, reverse_sql=migrations.RunSQL.noop) for table in TENANT_TABLES],
        migrations.RunSQL(INVITEE_READ, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(_fulltext_function_sql(), reverse_sql=migrations.RunSQL.noop),
    ]
