"""Embedding models change safely: search keeps working while vectors of a new model are built.

- documents_chunk.embedding becomes an untyped `vector` (any dimension). The table-wide HNSW
  index becomes one per dimension, on the expression `(embedding::vector(N))` with the
  predicate `vector_dims(embedding) = N` (pgvector indexes need a fixed dimension); this
  migration makes the 384-d one (the bundled model), search.maintenance makes others when a
  model of another dimension is migrated to. Per-account indexes (chunk_embedding_hnsw_a<id>,
  on the old typed column) are dropped first and rebuilt by the search-index cron job.
- ActiveEmbeddingModel: the model an account's search uses.
- ChunkEmbedding: vectors of the model an account migrates to, beside the active ones.
- ReindexRun: kind (reindex | migration), progress per batch, estimate, resumable position.
"""

import django.db.models.deletion
import django.db.models.manager
import pgvector.django.vector
from django.db import migrations, models

from core.rls import enable_rls

DROP_TENANT_INDEXES = """
DO $$
DECLARE name text;
BEGIN
  FOR name IN SELECT indexname FROM pg_indexes
              WHERE tablename = 'documents_chunk' AND indexname LIKE 'chunk\\_embedding\\_hnsw\\_a%' LOOP
    EXECUTE format('DROP INDEX IF EXISTS %I', name);
  END LOOP;
END $$;
"""

MANAGERS = [("all_accounts", django.db.models.manager.Manager())]
OPTIONS = {"abstract": False, "base_manager_name": "all_accounts", "default_manager_name": "all_accounts"}


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("documents", "0009_chunk_text_source"),
    ]

    operations = [
        migrations.RunSQL(DROP_TENANT_INDEXES, reverse_sql=migrations.RunSQL.noop),
        migrations.RemoveIndex(model_name="chunk", name="chunk_embedding_hnsw"),
        migrations.AlterField(model_name="chunk", name="embedding", field=pgvector.django.vector.VectorField()),
        migrations.RunSQL(
            "CREATE INDEX IF NOT EXISTS chunk_embedding_hnsw_d384 ON documents_chunk USING hnsw "
            "((embedding::vector(384)) vector_cosine_ops) WITH (m = 16, ef_construction = 64) "
            "WHERE vector_dims(embedding) = 384",
            reverse_sql="DROP INDEX IF EXISTS chunk_embedding_hnsw_d384",
        ),
        migrations.CreateModel(
            name="ActiveEmbeddingModel",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("model", models.CharField(max_length=200)),
                ("dimensions", models.PositiveIntegerField()),
                ("switched_at", models.DateTimeField(auto_now_add=True)),
                ("account", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, to="accounts.account")),
            ],
            options=OPTIONS,
            managers=MANAGERS,
        ),
        migrations.AddConstraint(
            model_name="activeembeddingmodel",
            constraint=models.UniqueConstraint(fields=("account",), name="active_embedding_model_per_account"),
        ),
        migrations.CreateModel(
            name="ChunkEmbedding",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("model", models.CharField(max_length=200)),
                ("embedding", pgvector.django.vector.VectorField()),
                ("account", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, to="accounts.account")),
                (
                    "chunk",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="documents.chunk"
                    ),
                ),
                (
                    "document",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="documents.document"
                    ),
                ),
            ],
            options=OPTIONS,
            managers=MANAGERS,
        ),
        migrations.AddConstraint(
            model_name="chunkembedding",
            constraint=models.UniqueConstraint(fields=("chunk", "model"), name="chunk_embedding_unique"),
        ),
        migrations.AddIndex(
            model_name="chunkembedding",
            index=models.Index(fields=["document", "model"], name="chunk_embedding_document"),
        ),
        enable_rls("documents_activeembeddingmodel"),
        enable_rls("documents_chunkembedding"),
        migrations.AddField(
            model_name="reindexrun",
            name="kind",
            field=models.CharField(
                choices=[("reindex", "Reindex"), ("migration", "Embedding model migration")],
                default="reindex",
                max_length=10,
            ),
        ),
        migrations.AlterField(
            model_name="reindexrun",
            name="status",
            field=models.CharField(
                choices=[("running", "Running"), ("done", "Done"), ("cancelled", "Cancelled"), ("failed", "Failed")],
                default="running",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="reindexrun", name="embedding_dimensions", field=models.PositiveIntegerField(default=0)
        ),
        migrations.AddField(
            model_name="reindexrun", name="current_document_id", field=models.BigIntegerField(blank=True, null=True)
        ),
        migrations.AddField(
            model_name="reindexrun", name="current_revision", field=models.PositiveIntegerField(blank=True, null=True)
        ),
        migrations.AddField(
            model_name="reindexrun", name="progress_done", field=models.PositiveIntegerField(default=0)
        ),
        migrations.AddField(
            model_name="reindexrun", name="progress_total", field=models.PositiveIntegerField(default=0)
        ),
        migrations.AddField(
            model_name="reindexrun", name="credits_estimate", field=models.PositiveIntegerField(default=0)
        ),
        migrations.AddField(
            model_name="reindexrun", name="credits_charged", field=models.PositiveIntegerField(default=0)
        ),
        migrations.AddField(model_name="reindexrun", name="error", field=models.TextField(blank=True)),
    ]
