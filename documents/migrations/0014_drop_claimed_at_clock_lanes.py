"""Fair ingestion: what 0013 left twice, and the lanes' times by the clock.

- `Document.claimed_at` (0011) and its index were the old claim's "when was this account last
  served" (the latest per account). The lanes' `served_at` (0013, filled from it) is that
  now, so the column, written on every claim, and its index go.
- The lane's `waiting_since` (set by the trigger) and `served_at` (set by the claim) take the
  clock's time, not the transaction's start: documents that become pending, or claims made,
  in one transaction still have an order.
"""

import importlib

from django.db import migrations

_0013 = importlib.import_module("documents.migrations.0013_ingestion_lane")
# 0013's function alone (its triggers stay), with the clock's time.
_FUNCTION_SQL = _0013.TRIGGER_SQL.split("CREATE TRIGGER")[0]
CLOCK_FUNCTION_SQL = _FUNCTION_SQL.replace("now()", "clock_timestamp()")


class Migration(migrations.Migration):
    dependencies = [
        ("documents", "0013_ingestion_lane"),
    ]

    operations = [
        migrations.RunSQL(CLOCK_FUNCTION_SQL, reverse_sql=_FUNCTION_SQL),
        migrations.RemoveIndex(
            model_name="document",
            name="document_account_claimed",
        ),
        migrations.RemoveField(
            model_name="document",
            name="claimed_at",
        ),
    ]
