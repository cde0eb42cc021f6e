from django.db import migrations

from core.rls import enable_rls


class Migration(migrations.Migration):
    dependencies = [("documents", "0001_initial")]

    operations = [
        enable_rls("documents_document"),
        enable_rls("documents_chunk"),
        enable_rls("documents_embeddingbatch"),
        enable_rls("documents_reindexrun"),
    ]
