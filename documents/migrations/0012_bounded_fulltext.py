"""Full text ranks a bounded pool of matches.

Why: `chunk_fulltext_search` (0003, 0007) ranked every chunk of the account that had any of
the query's words with `ts_rank_cd`. For the 100,000-chunk account of the 1M-chunk benchmark
a three-word query matches ~27,000 chunks: 100-180 ms on a quiet machine, three times the
vector half (docs/benchmarks.md, "Search at scale"). Real questions do the same on a smaller
scale: in the 20,000-chunk Python manual of `bench retrieval_eval` half the FAQ questions
share a word with more than 6,000 chunks ("python", "use", "function").

Now the function reads and ranks at most `p_pool` matching chunks (at least `p_limit`),
taken tier by tier, each tier a scan the GIN index answers by itself, best tier first:
1. chunks with all the query's words (websearch_to_tsquery's AND): ranked first as before
   (+1 on their rank);
2. for a plain list of words, chunks with the j rarest of them, j = k-1 down to 1 (at most
   MAX_WORD_TIERS tiers), rarity from the column's statistics: the pool keeps the chunks
   with the most telling words rather than the first ones on disk with a common word;
3. chunks with any of the words.
Each tier excludes the ones before it, and reading stops once the pool is full, so the
rows read and ranked are bounded whatever the account's size. The pool is ranked exactly as
in 0007, so results are 0007's whenever the account has at most `p_pool` matching chunks
(every account of at most `p_pool` chunks, and any query with fewer matches). Past that, a
tier that overflows is cut in the order the scan meets its rows, not by rank: the price of
the bound, measured against the unbounded ranking in docs/benchmarks.md, and with
`bench retrieval_eval`.

Everything else is 0007's: SECURITY DEFINER owned by `groundwork_search`, only for the
signed context's account, only visible collections (optionally narrowed), never a chunk of
a `deleting` document (filtered inside each tier, so such chunks take no room in the pool),
ids and ranks only. The signature gains `p_pool` (with a default): 0007's function is
dropped and this one handed to `groundwork_search` with 0007's grants (and documents'
account_id, to list the account's deleting documents once).
"""

import importlib

from django.db import migrations

from core.rls import CTX_ACCOUNT_ID

_0007 = importlib.import_module("documents.migrations.0007_collection_visibility")

OLD_SIGNATURE = _0007.FULLTEXT_SIGNATURE  # (bigint, text, integer, bigint[])
SIGNATURE = "public.chunk_fulltext_search(bigint, text, integer, bigint[], integer)"
DEFAULT_POOL = 1000  # retrieval.search.query.FULLTEXT_POOL passes its own
# At most this many tiers of "the j rarest words" between "all the words" and "any word".
MAX_WORD_TIERS = 6

GRANTS = (
    _0007.FULLTEXT_GRANTS
    + """
        GRANT SELECT (account_id) ON public.documents_document TO groundwork_search;"""
)

# A plain list of words as websearch_to_tsquery writes it: 'a' & 'b' & 'c' (quotes doubled
# inside a word, backslashes escaped); one word of it.
_WORD = r"'(?:[^'\\]|''|\\.)*'"
PLAIN_WORDS = rf"^{_WORD}(?: & {_WORD})+$"

CREATE_FUNCTION = rf"""
DROP FUNCTION IF EXISTS {OLD_SIGNATURE};
CREATE OR REPLACE FUNCTION public.chunk_fulltext_search(p_account_id bigint, p_query text, p_limit integer,
                                                        p_collection_ids bigint[] DEFAULT NULL,
                                                        p_pool integer DEFAULT {DEFAULT_POOL})
RETURNS TABLE (chunk_id bigint, rank real)
LANGUAGE plpgsql STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, public
-- A custom plan for every statement: each tier's words are then constants that the planner
-- estimates from the GIN statistics, so it picks the right index for a tenant of any size.
SET plan_cache_mode = force_custom_plan
AS $fn$
DECLARE
    all_terms tsquery := websearch_to_tsquery('english', p_query);
    any_term tsquery;
    words tsquery[];   -- the query's words, rarest first (a plain list of words only)
    tiers tsquery[];   -- nested matches, narrowest first: tier i is tiers[i] minus tiers[i - 1]
    prefix tsquery;
    taken tsquery;     -- what the tiers before this one matched (read already)
    visible bigint[];
    deleting bigint[];
    pool_size integer := GREATEST(p_pool, p_limit);
    ids bigint[] := '{{}}';
    ranks real[] := '{{}}';
    tier_ids bigint[];
    tier_ranks real[];
BEGIN
    -- Only for the transaction's own account (core/rls.py): nothing for another id.
    IF p_account_id IS DISTINCT FROM {CTX_ACCOUNT_ID} OR numnode(all_terms) = 0 THEN
        RETURN;
    END IF;
    -- See 0003: match any of the words (a quoted or hyphenated phrase stays one unit), rank
    -- chunks with all of them first; a negation keeps its exact websearch meaning.
    any_term := CASE WHEN strpos(all_terms::text, '!') > 0 THEN all_terms
                     ELSE replace(all_terms::text, ' & ', ' | ')::tsquery END;
    IF all_terms::text ~ '{PLAIN_WORDS.replace("'", "''")}' THEN
        SELECT array_agg(w.word ORDER BY COALESCE(f.freq, 0), w.n) INTO words
        FROM (SELECT r.found[1]::tsquery AS word, min(r.n) AS n,
                     replace(substr(r.found[1], 2, length(r.found[1]) - 2), '''''', '''') AS lexeme
              FROM regexp_matches(all_terms::text, '{_WORD.replace("'", "''")}', 'g') WITH ORDINALITY AS r(found, n)
              GROUP BY r.found[1]) AS w
        -- A word outside the column's most common elements counts as rare (frequency 0).
        LEFT JOIN (SELECT e.elem, e.freq
                   FROM pg_catalog.pg_stats AS s,
                        unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(elem, freq)
                   WHERE s.schemaname = 'public' AND s.tablename = 'documents_chunk'
                     AND s.attname = 'search_vector') AS f ON f.elem = w.lexeme;
    END IF;
    tiers := ARRAY[all_terms];
    IF cardinality(words) > 1 THEN
        FOR j IN REVERSE LEAST(cardinality(words) - 1, {MAX_WORD_TIERS}) .. 1 LOOP
            prefix := words[1];
            FOR m IN 2 .. j LOOP
                prefix := prefix && words[m];
            END LOOP;
            tiers := array_append(tiers, prefix);
        END LOOP;
    END IF;
    IF any_term <> tiers[cardinality(tiers)] THEN  -- equal for one word, or with a negation
        tiers := array_append(tiers, any_term);
    END IF;

    visible := public.visible_collection_ids();
    deleting := ARRAY(SELECT d.id FROM public.documents_document AS d
                      WHERE d.account_id = p_account_id AND d.status = 'deleting');
    FOR i IN 1 .. cardinality(tiers) LOOP
        EXIT WHEN cardinality(ids) >= pool_size;
        -- Tiers nest, so "not in the ones before" is "not matching the one before". As a
        -- filter on the rows read, not in the GIN condition: a negation there spoils the
        -- planner's estimate (it walked the account's btree, 210 ms). It re-reads at most
        -- the chunks already in the pool.
        taken := CASE WHEN i = 1 THEN NULL ELSE tiers[i - 1] END;
        -- A MATERIALIZED CTE is planned as if all its rows were read (a LIMIT would lure the
        -- planner into walking a large account's btree with `@@` as a filter, hoping to stop
        -- early: 90 ms measured for a word in 2 % of 100,000 chunks) but runs only as far as
        -- the LIMIT reads it: the bitmap of matches comes from the indexes, and only the rows
        -- that enter the pool are read from the table and ranked. `collection_id + 0`: the
        -- visible collections are most often the whole account, and their btree (with an
        -- estimate the planner cannot make well) is never the better way in.
        WITH tier AS MATERIALIZED (
            SELECT c.id, c.search_vector
            FROM public.documents_chunk AS c
            WHERE c.account_id = p_account_id
              AND c.search_vector @@ tiers[i]
              AND (taken IS NULL OR NOT (c.search_vector @@ taken))
              AND (c.collection_id + 0) = ANY (visible)
              AND (p_collection_ids IS NULL OR (c.collection_id + 0) = ANY (p_collection_ids))
              AND NOT (c.document_id = ANY (deleting)))
        SELECT array_agg(t.id), array_agg((ts_rank_cd(t.search_vector, any_term)
                                           + CASE WHEN i = 1 THEN 1 ELSE 0 END)::real)
        INTO tier_ids, tier_ranks
        FROM (SELECT tier.id, tier.search_vector FROM tier LIMIT pool_size - cardinality(ids)) AS t;
        ids := ids || COALESCE(tier_ids, '{{}}');
        ranks := ranks || COALESCE(tier_ranks, '{{}}');
    END LOOP;
    RETURN QUERY SELECT u.id, u.r FROM unnest(ids, ranks) AS u(id, r) ORDER BY u.r DESC, u.id LIMIT p_limit;
END
$fn$;
""" + _0007._hand_to_search_role(SIGNATURE, GRANTS)

REVERSE = (
    f"DROP FUNCTION IF EXISTS {SIGNATURE};\n"
    + _0007.FULLTEXT_FUNCTION
    + _0007._hand_to_search_role(OLD_SIGNATURE, _0007.FULLTEXT_GRANTS)
)


class Migration(migrations.Migration):
    dependencies = [("documents", "0011_document_claimed_at")]

    operations = [migrations.RunSQL(CREATE_FUNCTION, reverse_sql=REVERSE)]
