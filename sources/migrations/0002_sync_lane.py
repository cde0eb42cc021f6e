"""Fair syncs: each account's lane in the queue of syncs (sources/sync_queue.py, by the rule
of core/fair_queue.py), so one account's backlog of syncs does not hold every other
account's behind it. The lanes start from the syncs queued now (running, never claimed)."""

import django.db.models.deletion
import django.db.models.manager
from django.db import migrations, models

from core.rls import enable_rls
from core.tenancy import dangerously_bypass_tenancy

BACKFILL_SQL = """
INSERT INTO sources_synclane (account_id, waiting, waiting_since, served_at)
SELECT account_id, true, min(started_at), NULL FROM sources_sourcesync
WHERE status = 'running' AND heartbeat_at IS NULL GROUP BY account_id
ON CONFLICT (account_id) DO NOTHING
"""


def backfill(apps, schema_editor):
    with dangerously_bypass_tenancy(reason="migration sources.0002: the lanes of the syncs queued now"):
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(BACKFILL_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0011_user_session_epoch"),
        ("sources", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="SyncLane",
            fields=[
                (
                    "account",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="accounts.account",
                    ),
                ),
                ("waiting", models.BooleanField(default=False)),
                ("waiting_since", models.DateTimeField(blank=True, null=True)),
                ("served_at", models.DateTimeField(blank=True, null=True)),
            ],
            managers=[
                ("all_accounts", django.db.models.manager.Manager()),
            ],
        ),
        migrations.AddIndex(
            model_name="sourcesync",
            index=models.Index(
                condition=models.Q(("status", "running")), fields=["account", "id"], name="source_sync_running"
            ),
        ),
        migrations.AddIndex(
            model_name="synclane",
            index=models.Index(
                models.OrderBy(models.F("served_at"), nulls_first=True),
                models.F("waiting_since"),
                models.F("account"),
                condition=models.Q(("waiting", True)),
                name="source_sync_lane_fairest",
            ),
        ),
        enable_rls("sources_synclane"),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
