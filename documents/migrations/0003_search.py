"""Full-text search that keeps its GIN index under row-level security.

Why: `documents_chunk` has FORCEd RLS, and the planner may not evaluate a non-leakproof
operator such as `@@` before the policy's quals, so under RLS it cannot use the GIN index
and full text degrades to a scan of every row the policy lets through (measured in
docs/benchmarks.md, "Search at scale"). A SECURITY DEFINER function owned by the same
(non-BYPASSRLS) app role would still be filtered, so the function is handed to
`groundwork_search`: a NOLOGIN, BYPASSRLS role that only the superuser can create
(config/embedded.py provisions it; deployments run the same SQL once).

What the function guarantees, whoever owns it:
- it answers only for the transaction's own account: `p_account_id` must equal the
  signed context's account (core/rls.py), otherwise it returns nothing (it never trusts
  its argument alone, nor a setting);
- it returns ids and ranks only; the caller reads the rows themselves under RLS;
- chunks of `deleting` documents are never returned;
- EXECUTE is revoked from PUBLIC and granted to the migrating (app) role only.

Without the `groundwork_search` role (or without the right to hand the function to it) the
function stays owned by the app role: still correct and isolated (RLS filters it), only
unindexed, which is the behaviour before this migration.
"""

from django.db import migrations

from core.rls import CTX_ACCOUNT_ID

SEARCH_ROLE = "groundwork_search"
SIGNATURE = "public.chunk_fulltext_search(bigint, text, integer)"

CREATE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION public.chunk_fulltext_search(p_account_id bigint, p_query text, p_limit integer)
RETURNS TABLE (chunk_id bigint, rank real)
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
-- A fixed search_path: a SECURITY DEFINER function must not resolve names through the
-- caller's path. A custom plan every call: the best plan differs per tenant size.
SET search_path = pg_catalog, public
SET plan_cache_mode = force_custom_plan
AS $fn$
    SELECT c.id, (ts_rank_cd(c.search_vector, q.any_term) + CASE WHEN c.search_vector @@ q.all_terms
                                                            THEN 1 ELSE 0 END)::real AS rank
    FROM public.documents_chunk AS c
    CROSS JOIN (
        -- websearch_to_tsquery ANDs every word; a question's words are rarely all in one
        -- chunk. Match any of its words (a quoted or hyphenated phrase stays one unit), and
        -- rank chunks that have all of them first. A query with a negation (`-word`) keeps
        -- its exact websearch meaning: OR would turn "a -b" into "a or not b".
        SELECT w.query AS all_terms,
               CASE WHEN strpos(w.query::text, '!') > 0 THEN w.query
                    ELSE replace(w.query::text, ' & ', ' | ')::tsquery END AS any_term
        FROM websearch_to_tsquery('english', p_query) AS w(query)
    ) AS q
    WHERE p_account_id = {CTX_ACCOUNT_ID}
      AND c.account_id = p_account_id
      AND c.search_vector @@ q.any_term
      AND NOT EXISTS (SELECT 1 FROM public.documents_document AS d
                      WHERE d.id = c.document_id AND d.status = 'deleting')
    ORDER BY rank DESC, c.id
    LIMIT p_limit
$fn$;
REVOKE ALL ON FUNCTION {SIGNATURE} FROM PUBLIC;
DO $do$
DECLARE
    app_role text;
BEGIN
    EXECUTE format('GRANT EXECUTE ON FUNCTION {SIGNATURE} TO %I', current_user);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{SEARCH_ROLE}' AND rolbypassrls AND NOT rolcanlogin)
       AND pg_has_role(current_user, '{SEARCH_ROLE}', 'SET') THEN
        GRANT USAGE, CREATE ON SCHEMA public TO {SEARCH_ROLE};
        GRANT SELECT (id, account_id, document_id, search_vector) ON public.documents_chunk TO {SEARCH_ROLE};
        GRANT SELECT (id, status) ON public.documents_document TO {SEARCH_ROLE};
        ALTER FUNCTION {SIGNATURE} OWNER TO {SEARCH_ROLE};
        -- A change of owner hands the old owner's ACL entry to the new owner: grant the app
        -- role EXECUTE again, as the new owner.
        app_role := current_user;
        EXECUTE format('SET LOCAL ROLE %I', '{SEARCH_ROLE}');
        EXECUTE format('GRANT EXECUTE ON FUNCTION {SIGNATURE} TO %I', app_role);
        EXECUTE format('SET LOCAL ROLE %I', app_role);
        -- CREATE was needed only to take ownership; the role owns nothing else.
        REVOKE CREATE ON SCHEMA public FROM {SEARCH_ROLE};
    ELSE
        RAISE NOTICE 'role {SEARCH_ROLE} is not available: full-text search stays correct but unindexed under RLS';
    END IF;
END
$do$;
"""

DROP_FUNCTION = f"DROP FUNCTION IF EXISTS {SIGNATURE};"


class Migration(migrations.Migration):
    dependencies = [("documents", "0002_row_level_security")]

    operations = [migrations.RunSQL(CREATE_FUNCTION, reverse_sql=DROP_FUNCTION)]
