"""Collections become required and visible only to whom they may be: the database's half.

- `visible_collection_ids()`: the ids of the collections of the transaction's account that
  its principal may read (CTX_USER_ID / CTX_API_KEY_ID of core.rls): unrestricted ones;
  restricted ones with an access row for the principal (an API key is the key, not its
  creator); all of them for an owner or admin of the account, and for a context without a
  principal (system jobs: ingestion, deletion, reindex, the sweeper). STABLE, SECURITY
  DEFINER, owned like `chunk_fulltext_search` (0003): handed to `groundwork_search` when
  that role exists, so it reads its four tables whatever their policies; it filters by the
  context's account itself.
- the RESTRICTIVE policy `collection_visibility` on documents_document and documents_chunk:
  a row is readable and writable only in a visible collection (or inside the audited
  bypass). Written `collection_id = ANY ((SELECT visible_collection_ids()))`, an InitPlan:
  one call per statement, then an array test per row.
- `chunk_fulltext_search` (SECURITY DEFINER, so it bypasses RLS) filters by the same set
  itself, and takes an optional list of collection ids to narrow to.

Staging rows (documents_embeddingbatch) hold vectors only, no text, and search never reads
them: they stay under tenant isolation alone.
"""

import importlib

import django.db.models.deletion
from django.db import migrations, models

from core.rls import BYPASS, CTX_ACCOUNT_ID, CTX_API_KEY_ID, CTX_USER_ID

SEARCH_ROLE = "groundwork_search"
VISIBLE_SIGNATURE = "public.visible_collection_ids()"
OLD_FULLTEXT_SIGNATURE = "public.chunk_fulltext_search(bigint, text, integer)"
FULLTEXT_SIGNATURE = "public.chunk_fulltext_search(bigint, text, integer, bigint[])"
MANAGER_ROLES = ("owner", "admin")  # accounts.models.MANAGER_ROLES when this was written

VISIBLE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {VISIBLE_SIGNATURE}
RETURNS bigint[]
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, public
AS $fn$
    SELECT COALESCE(array_agg(c.id ORDER BY c.id), '{{}}')::bigint[]
    FROM public.documents_collection AS c
    WHERE c.account_id = {CTX_ACCOUNT_ID}
      AND (NOT c.restricted
           OR ({CTX_USER_ID} IS NULL AND {CTX_API_KEY_ID} IS NULL)
           OR EXISTS (SELECT 1 FROM public.documents_collectionaccess AS a
                      WHERE a.collection_id = c.id AND a.account_id = c.account_id
                        AND (a.api_key_id = {CTX_API_KEY_ID}
                             OR ({CTX_API_KEY_ID} IS NULL AND a.user_id = {CTX_USER_ID})))
           OR ({CTX_API_KEY_ID} IS NULL
               AND EXISTS (SELECT 1 FROM public.accounts_membership AS m
                           WHERE m.account_id = c.account_id AND m.user_id = {CTX_USER_ID}
                             AND m.role IN {MANAGER_ROLES!r})))
$fn$;
"""

FULLTEXT_FUNCTION = f"""
DROP FUNCTION IF EXISTS {OLD_FULLTEXT_SIGNATURE};
CREATE OR REPLACE FUNCTION public.chunk_fulltext_search(p_account_id bigint, p_query text, p_limit integer,
                                                        p_collection_ids bigint[] DEFAULT NULL)
RETURNS TABLE (chunk_id bigint, rank real)
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, public
SET plan_cache_mode = force_custom_plan
AS $fn$
    SELECT c.id, (ts_rank_cd(c.search_vector, q.any_term) + CASE WHEN c.search_vector @@ q.all_terms
                                                            THEN 1 ELSE 0 END)::real AS rank
    FROM public.documents_chunk AS c
    CROSS JOIN (
        -- See 0003: match any of the words, rank chunks with all of them first; a negation
        -- keeps its exact websearch meaning.
        SELECT w.query AS all_terms,
               CASE WHEN strpos(w.query::text, '!') > 0 THEN w.query
                    ELSE replace(w.query::text, ' & ', ' | ')::tsquery END AS any_term
        FROM websearch_to_tsquery('english', p_query) AS w(query)
    ) AS q
    CROSS JOIN (SELECT public.visible_collection_ids() AS ids) AS v
    WHERE p_account_id = {CTX_ACCOUNT_ID}
      AND c.account_id = p_account_id
      AND c.collection_id = ANY (v.ids)
      AND (p_collection_ids IS NULL OR c.collection_id = ANY (p_collection_ids))
      AND c.search_vector @@ q.any_term
      AND NOT EXISTS (SELECT 1 FROM public.documents_document AS d
                      WHERE d.id = c.document_id AND d.status = 'deleting')
    ORDER BY rank DESC, c.id
    LIMIT p_limit
$fn$;
"""


def _hand_to_search_role(signature: str, grants: str) -> str:
    """0003's ownership logic for one function: EXECUTE for the migrating (app) role only;
    owned by `groundwork_search` (NOLOGIN, BYPASSRLS) with `grants` when that role exists."""
    return f"""
REVOKE ALL ON FUNCTION {signature} FROM PUBLIC;
DO $do$
DECLARE
    app_role text;
BEGIN
    EXECUTE format('GRANT EXECUTE ON FUNCTION {signature} TO %I', current_user);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{SEARCH_ROLE}' AND rolbypassrls AND NOT rolcanlogin)
       AND pg_has_role(current_user, '{SEARCH_ROLE}', 'SET') THEN
        GRANT USAGE, CREATE ON SCHEMA public TO {SEARCH_ROLE};
        {grants}
        ALTER FUNCTION {signature} OWNER TO {SEARCH_ROLE};
        app_role := current_user;
        EXECUTE format('SET LOCAL ROLE %I', '{SEARCH_ROLE}');
        EXECUTE format('GRANT EXECUTE ON FUNCTION {signature} TO %I', app_role);
        EXECUTE format('SET LOCAL ROLE %I', app_role);
        REVOKE CREATE ON SCHEMA public FROM {SEARCH_ROLE};
    ELSE
        RAISE NOTICE 'role {SEARCH_ROLE} is not available: {signature} stays owned by the app role';
    END IF;
END
$do$;
"""


VISIBLE_GRANTS = """
        GRANT SELECT (id, account_id, restricted) ON public.documents_collection TO groundwork_search;
        GRANT SELECT (collection_id, account_id, user_id, api_key_id) ON public.documents_collectionaccess
            TO groundwork_search;
        GRANT SELECT (account_id, user_id, role) ON public.accounts_membership TO groundwork_search;"""
FULLTEXT_GRANTS = """
        GRANT SELECT (id, account_id, document_id, collection_id, search_vector) ON public.documents_chunk
            TO groundwork_search;
        GRANT SELECT (id, status) ON public.documents_document TO groundwork_search;"""

POLICY = f"({BYPASS} OR collection_id = ANY ((SELECT {VISIBLE_SIGNATURE})::bigint[]))"
POLICIES = "\n".join(
    f"""
DROP POLICY IF EXISTS collection_visibility ON "{table}";
CREATE POLICY collection_visibility ON "{table}" AS RESTRICTIVE FOR ALL USING {POLICY} WITH CHECK {POLICY};"""
    for table in ("documents_document", "documents_chunk")
)

FORWARDS = (
    VISIBLE_FUNCTION
    + _hand_to_search_role(VISIBLE_SIGNATURE, VISIBLE_GRANTS)
    + FULLTEXT_FUNCTION
    + _hand_to_search_role(FULLTEXT_SIGNATURE, FULLTEXT_GRANTS)
    + POLICIES
)


def _backwards_sql() -> str:
    old = importlib.import_module("documents.migrations.0003_search")
    return f"""
DROP POLICY IF EXISTS collection_visibility ON "documents_document";
DROP POLICY IF EXISTS collection_visibility ON "documents_chunk";
DROP FUNCTION IF EXISTS {FULLTEXT_SIGNATURE};
DROP FUNCTION IF EXISTS {VISIBLE_SIGNATURE};
{old.CREATE_FUNCTION}
"""


class Migration(migrations.Migration):
    dependencies = [("documents", "0006_default_collections")]

    operations = [
        migrations.AlterField(
            model_name="document",
            name="collection",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.RESTRICT, related_name="documents", to="documents.collection"
            ),
        ),
        migrations.AlterField(
            model_name="chunk",
            name="collection",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.RESTRICT, related_name="+", to="documents.collection"
            ),
        ),
        migrations.RunSQL(FORWARDS, reverse_sql=_backwards_sql()),
    ]
