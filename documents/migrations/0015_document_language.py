"""Full text in each document's language.

- Document.language (ISO 639-1, "" unknown) and Document.search_config (a regconfig),
  detected at ingestion (documents/language.py); existing documents keep "english".
- Chunk.search_config, copied from the document at publish, and the generated
  `search_vector` becomes to_tsvector(search_config, content). Existing chunks get
  "english", so their vectors are the ones they had (SET EXPRESSION recomputes the column,
  and the GIN index, in one table rewrite under an exclusive lock: minutes for millions of
  chunks). A reindex of a document, or `manage.py fulltext_languages` (retrieval/search/
  maintenance.py), detects and re-indexes documents ingested before this migration.
- chunk_fulltext_search (0012) searches under every configuration the account's documents
  use: the query parsed by each, OR'd into one constant tsquery, so each tier is still one
  GIN scan (docs/benchmarks.md, "Embedding models": EXPLAIN). With one configuration (every
  account before this migration) the query is 0012's exactly; with several, the "rarest
  words" tiers are skipped (the OR'd query is not a plain list of words): all words, then
  any word. Everything else is 0012's.
"""

import importlib

from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import migrations, models

import documents.models
from core.rls import CTX_ACCOUNT_ID

_0012 = importlib.import_module("documents.migrations.0012_bounded_fulltext")

GRANTS = (
    _0012.GRANTS
    + """
        GRANT SELECT (search_config) ON public.documents_document TO groundwork_search;"""
)

_OLD_TERMS = "    all_terms tsquery := websearch_to_tsquery('english', p_query);\n"
_OLD_CHECK = f"""    IF p_account_id IS DISTINCT FROM {CTX_ACCOUNT_ID} OR numnode(all_terms) = 0 THEN
        RETURN;
    END IF;
"""
_NEW_TERMS = "    all_terms tsquery;\n    config regconfig;\n"
_NEW_CHECK = f"""    IF p_account_id IS DISTINCT FROM {CTX_ACCOUNT_ID} THEN
        RETURN;
    END IF;
    -- The query under each configuration the account's documents are indexed with (0015).
    FOR config IN SELECT DISTINCT d.search_config FROM public.documents_document AS d
                  WHERE d.account_id = p_account_id ORDER BY 1 LOOP
        all_terms := CASE WHEN all_terms IS NULL THEN websearch_to_tsquery(config, p_query)
                          ELSE all_terms || websearch_to_tsquery(config, p_query) END;
    END LOOP;
    all_terms := COALESCE(all_terms, websearch_to_tsquery('english', p_query));
    IF numnode(all_terms) = 0 THEN
        RETURN;
    END IF;
"""
assert _OLD_TERMS in _0012.CREATE_FUNCTION and _OLD_CHECK in _0012.CREATE_FUNCTION
_FUNCTION = _0012.CREATE_FUNCTION.split("$fn$;\n", 1)[0] + "$fn$;\n"
CREATE_FUNCTION = _FUNCTION.replace(_OLD_TERMS, _NEW_TERMS).replace(
    _OLD_CHECK, _NEW_CHECK
) + _0012._0007._hand_to_search_role(_0012.SIGNATURE, GRANTS)
REVERSE_FUNCTION = _0012.CREATE_FUNCTION

SET_EXPRESSION = """ALTER TABLE documents_chunk ALTER COLUMN search_vector
    SET EXPRESSION AS (to_tsvector(search_config, COALESCE(content, '')));"""
OLD_EXPRESSION = """ALTER TABLE documents_chunk ALTER COLUMN search_vector
    SET EXPRESSION AS (to_tsvector('english'::regconfig, COALESCE(content, '')));"""


class Migration(migrations.Migration):
    dependencies = [("documents", "0014_drop_claimed_at_clock_lanes")]

    operations = [
        migrations.AddField("document", "language", models.CharField(blank=True, default="", max_length=8)),
        migrations.AddField("document", "search_config", documents.models.RegConfigField(db_default="english")),
        migrations.AddField("chunk", "search_config", documents.models.RegConfigField(db_default="english")),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    "chunk",
                    "search_vector",
                    models.GeneratedField(
                        db_persist=True,
                        expression=SearchVector("content", config=models.F("search_config")),
                        output_field=SearchVectorField(),
                    ),
                )
            ],
            database_operations=[migrations.RunSQL(SET_EXPRESSION, reverse_sql=OLD_EXPRESSION)],
        ),
        migrations.RunSQL(CREATE_FUNCTION, reverse_sql=REVERSE_FUNCTION),
    ]
