"""Tags on documents that steer retrieval.

- Document.tags (text[], GIN index for the Knowledge base's filter), default empty, also as
  a database default so raw inserts (bench/search_scale.py) need not name it.
- RetrievalSettings: one row per account, `exclude_tags` (documents carrying any of them are
  never retrieved), a tenant table under row-level security.
- chunk_fulltext_search (0015) gains `p_excluded_document_ids` (default NULL): the ids of the
  documents the search leaves out by their tags, computed by search's first statement
  (retrieval/search/sql.py, PREPARE_SQL) with the deleting ones. They are filtered inside
  each tier, like the deleting documents, so they take no room in the pool and top-k stays k.
  0015's five-argument function is dropped and this one handed to `groundwork_search` with
  0015's grants (it reads nothing new: the caller computes the ids under its own RLS).
"""

import importlib

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
import django.db.models.deletion
import django.db.models.manager
from django.conf import settings
from django.db import migrations, models

from core.rls import enable_rls

_0015 = importlib.import_module("documents.migrations.0015_document_language")
_0012 = _0015._0012

OLD_SIGNATURE = _0012.SIGNATURE  # (bigint, text, integer, bigint[], integer)
SIGNATURE = "public.chunk_fulltext_search(bigint, text, integer, bigint[], integer, bigint[])"

_OLD_PARAMS = f"p_pool integer DEFAULT {_0012.DEFAULT_POOL})"
_NEW_PARAMS = (
    f"p_pool integer DEFAULT {_0012.DEFAULT_POOL},\n"
    "                                                        p_excluded_document_ids bigint[] DEFAULT NULL)"
)
_OLD_DELETING = """                      WHERE d.account_id = p_account_id AND d.status = 'deleting');"""
_NEW_DELETING = """                      WHERE d.account_id = p_account_id AND d.status = 'deleting')
                || COALESCE(p_excluded_document_ids, '{}'::bigint[]);"""
_FUNCTION = _0015.CREATE_FUNCTION.split("$fn$;\n", 1)[0] + "$fn$;\n"
assert _OLD_PARAMS in _FUNCTION and _OLD_DELETING in _FUNCTION
CREATE_FUNCTION = (
    f"DROP FUNCTION IF EXISTS {OLD_SIGNATURE};\n"
    + _FUNCTION.replace(_OLD_PARAMS, _NEW_PARAMS).replace(_OLD_DELETING, _NEW_DELETING)
    + _0012._0007._hand_to_search_role(SIGNATURE, _0015.GRANTS)
)
REVERSE_FUNCTION = f"DROP FUNCTION IF EXISTS {SIGNATURE};\n" + _0015.CREATE_FUNCTION

TAGS_DEFAULT = "ALTER TABLE documents_document ALTER COLUMN tags SET DEFAULT '{}'::text[];"


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0008_names_without_control_characters"),
        ("documents", "0015_document_language"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="RetrievalSettings",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "exclude_tags",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.TextField(), blank=True, default=list, size=None
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            managers=[
                ("all_accounts", django.db.models.manager.Manager()),
            ],
        ),
        migrations.AddField(
            model_name="document",
            name="tags",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.TextField(), blank=True, default=list, size=None
            ),
        ),
        migrations.AddIndex(
            model_name="document",
            index=django.contrib.postgres.indexes.GinIndex(fields=["tags"], name="document_tags_gin"),
        ),
        migrations.AddField(
            model_name="retrievalsettings",
            name="account",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, to="accounts.account"),
        ),
        migrations.AddConstraint(
            model_name="retrievalsettings",
            constraint=models.UniqueConstraint(fields=("account",), name="retrieval_settings_per_account"),
        ),
        migrations.RunSQL(TAGS_DEFAULT, reverse_sql=migrations.RunSQL.noop),
        enable_rls("documents_retrievalsettings"),
        migrations.RunSQL(CREATE_FUNCTION, reverse_sql=REVERSE_FUNCTION),
    ]
