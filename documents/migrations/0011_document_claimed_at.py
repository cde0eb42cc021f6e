"""Fair ingestion: when a worker last took each document, indexed per
account, so the fair claim (documents/ingestion_queue.py) finds the account served least
recently without reading its documents. The index is built concurrently (no write lock on
a large documents table), hence a non-atomic migration."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("documents", "0010_embedding_models"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="claimed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        AddIndexConcurrently(
            model_name="document",
            index=models.Index(fields=["account", "claimed_at"], name="document_account_claimed"),
        ),
    ]
