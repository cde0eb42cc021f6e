from django.db import migrations

from core.rls import append_only, enable_rls


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [
        enable_rls("billing_accountbalance"),
        enable_rls("billing_creditledgerentry"),
        enable_rls("billing_credithold"),
        append_only(
            "billing_creditledgerentry",
            trigger="ledger_append_only",
            function="billing_ledger_append_only",
            what="the credit ledger",
        ),
    ]
