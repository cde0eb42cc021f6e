"""Every account gets its default collection ("General"), and every existing document and
chunk moves into it, before 0007 makes the column required."""

from django.db import migrations

from core.tenancy import dangerously_bypass_tenancy

DEFAULT_NAME = "General"


def forwards(apps, schema_editor):
    Account = apps.get_model("accounts", "Account")
    Collection = apps.get_model("documents", "Collection")
    Document = apps.get_model("documents", "Document")
    Chunk = apps.get_model("documents", "Chunk")
    # The tables are under forced RLS; a data migration is a cross-account system job.
    with dangerously_bypass_tenancy(reason="migration documents.0006: a default collection per account"):
        for account_id in Account.objects.values_list("pk", flat=True):
            general = Collection.objects.filter(
                account_id=account_id, is_default=True
            ).first() or Collection.objects.create(account_id=account_id, name=DEFAULT_NAME, is_default=True)
            Document.objects.filter(account_id=account_id, collection__isnull=True).update(collection=general)
            Chunk.objects.filter(account_id=account_id, collection__isnull=True).update(collection=general)


class Migration(migrations.Migration):
    dependencies = [("documents", "0005_collections"), ("accounts", "0001_initial")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
