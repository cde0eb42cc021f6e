"""Full text ranks a bounded pool of matches (issue 12, item 6).

Why: `chunk_fulltext_search` (0003, 0007) ranked every chunk of the account matching any
query word with `ts_rank_cd`, and ranking is most of its cost (the GIN bitmap itself is
cheap). For the 100,000-chunk account of the 1M-chunk benchmark a three-word query matches
~27,000 chunks: 100-180 ms, three times the vector half (docs/benchmarks.md, "Search at
scale").

Now the function ranks at most `p_pool` chunks (at least `p_limit`), taken in tiers that
the GIN index answers by itself, best tier first:
1. chunks with all the query's words (websearch_to_tsquery's AND): these already ranked
   first (+1 on their rank), so when the account has at least `p_limit` of them the top
   is drawn from them as before;
2. then chunks with some but not all of them (`any_term && !!all_terms`), to fill the pool.
Each tier is a LIMITed scan, so the rows read and ranked are bounded whatever the account's
size; the pool's ranking (and so the order of what is returned) is the one of 0007.
Results are exactly those of 0007 whenever the account has at most `p_pool` matching
chunks (every account of at most `p_pool` chunks, and any query with fewer matches).
Past that, a tier that overflows is cut in the order the scan meets its rows (physical
order), not by rank: the price of the bound, measured in docs/benchmarks.md against the
unbounded ranking and with `bench retrieval_eval`.

Everything else is 0007's: SECURITY DEFINER owned by `groundwork_search`, only for the
signed context's account, only visible collections (optionally narrowed), never a chunk
of a `deleting` document (checked inside each tier, so such chunks take no room in the
pool), ids and ranks only. The signature gains `p_pool` (with a default): 0007's function
is dropped and this one handed to `groundwork_search` with 0007's grants.
"""
import importlib

from django.db import migrations

from core.rls import CTX_ACCOUNT_ID

_0007 = importlib.import_module("documents.migrations.0007_collection_visibility")

OLD_SIGNATURE = _0007.FULLTEXT_SIGNATURE  # (bigint, text, integer, bigint[])
SIGNATURE = "public.chunk_fulltext_search(bigint, text, integer, bigint[], integer)"
DEFAULT_POOL = 1000  # documents.search.query.FULLTEXT_POOL passes its own

# The query's words as tsqueries (see 0003): `ALL_TERMS` is websearch_to_tsquery's AND of
# them, `ANY_TERM` matches any of them (a quoted or hyphenated phrase stays one unit); a query
# with a negation keeps its exact websearch meaning (then ANY = ALL, one tier). Written out in
# place rather than in a CTE: under the function's custom plans they fold to constants, so
# the planner estimates each tier from the GIN statistics of the words themselves.
ALL_TERMS = "websearch_to_tsquery('english', p_query)"
ANY_TERM = (f"(CASE WHEN strpos({ALL_TERMS}::text, '!') > 0 THEN {ALL_TERMS}"
            f" ELSE replace({ALL_TERMS}::text, ' & ', ' | ')::tsquery END)")

# One tier: the account's visible chunks matching `{match}`, in the order the scan meets them.
# `collection_id + 0`: the planner cannot know the visible collections (an InitPlan), takes
# them for 1 % of the table and walked the collection_id btree with `@@` as a filter
# (52,000 rows read for 1,000 matches); the account's size it knows from its statistics.
_TIER = """
        SELECT c.id, c.search_vector
        FROM public.documents_chunk AS c
        WHERE p_account_id = {ctx}
          AND c.account_id = p_account_id
          AND c.search_vector @@ {match}
          AND (c.collection_id + 0) = ANY ((SELECT public.visible_collection_ids())::bigint[])
          AND (p_collection_ids IS NULL OR (c.collection_id + 0) = ANY (p_collection_ids))
          AND NOT EXISTS (SELECT 1 FROM public.documents_document AS d
                          WHERE d.id = c.document_id AND d.status = 'deleting')"""

CREATE_FUNCTION = f"""
DROP FUNCTION IF EXISTS {OLD_SIGNATURE};
CREATE OR REPLACE FUNCTION public.chunk_fulltext_search(p_account_id bigint, p_query text, p_limit integer,
                                                        p_collection_ids bigint[] DEFAULT NULL,
                                                        p_pool integer DEFAULT {DEFAULT_POOL})
RETURNS TABLE (chunk_id bigint, rank real)
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, public
SET plan_cache_mode = force_custom_plan
AS $fn$
    -- Each tier is a MATERIALIZED CTE, which PostgreSQL plans as if all its rows were read
    -- (so a LIMIT cannot lure the planner into walking a large account's btree with `@@` as
    -- a filter, hoping to stop early: measured 90 ms for a word in 2 % of 100,000 chunks)
    -- but runs only as far as the pool below reads it: the bitmap of matches is built from
    -- the indexes, and only the rows that enter the pool are read from the table.
    WITH all_words AS MATERIALIZED ({_TIER.format(match=ALL_TERMS, ctx=CTX_ACCOUNT_ID)}
    ),
    some_words AS MATERIALIZED ({_TIER.format(match=f"({ANY_TERM} && !! {ALL_TERMS})", ctx=CTX_ACCOUNT_ID)}
    ),
    -- The tiers in order: the outer LIMIT stops reading as soon as the pool is full, so the
    -- second tier is not read at all when the first fills it.
    pool AS MATERIALIZED (
        (SELECT id, search_vector, 1 AS bonus FROM all_words LIMIT GREATEST(p_pool, p_limit))
        UNION ALL
        (SELECT id, search_vector, 0 AS bonus FROM some_words LIMIT GREATEST(p_pool, p_limit))
        LIMIT GREATEST(p_pool, p_limit)
    )
    SELECT pool.id, (ts_rank_cd(pool.search_vector, {ANY_TERM}) + pool.bonus)::real AS rank
    FROM pool
    ORDER BY rank DESC, pool.id
    LIMIT p_limit
$fn$;
""" + _0007._hand_to_search_role(SIGNATURE, _0007.FULLTEXT_GRANTS)

REVERSE = (f"DROP FUNCTION IF EXISTS {SIGNATURE};\n" + _0007.FULLTEXT_FUNCTION
           + _0007._hand_to_search_role(OLD_SIGNATURE, _0007.FULLTEXT_GRANTS))


class Migration(migrations.Migration):
    dependencies = [("documents", "0011_document_claimed_at")]

    operations = [migrations.RunSQL(CREATE_FUNCTION, reverse_sql=REVERSE)]
