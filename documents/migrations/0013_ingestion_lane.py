"""Fair ingestion at scale: an account's lane in the queue.

Why: the fair claim ranked every account with a pending document (three index probes each)
under one advisory lock, so with 2,000 accounts waiting a claim took ~50 ms and all workers
together claimed at most ~18 documents a second (docs/benchmarks.md). Now each account has
one `documents_ingestionlane` row: `waiting` (it has pending documents), `waiting_since`,
`served_at` (its last fair claim), and the claim reads the fairest waiting lanes through the
partial index `ingestion_lane_fairest`.

`waiting` is kept by the database, not by the code paths that make documents pending (upload,
reindex, retry, the sweeper, a claim handed back, the admin, SQL): a trigger on
documents_document marks the account's lane waiting whenever a row becomes pending, in that
row's transaction. The function runs as the writer (SECURITY INVOKER), so the lane row is
written under the same row-level security as the document. The claim clears `waiting`
itself (documents/ingestion_queue.py).

The lanes start from what the documents say: an account is waiting when it has a pending
document, since its oldest pending one, and was served when it last had a document claimed.
"""

import django.db.models.deletion
import django.db.models.manager
from django.db import migrations, models

from core.rls import enable_rls
from core.tenancy import dangerously_bypass_tenancy

TRIGGER_SQL = """
CREATE OR REPLACE FUNCTION documents_ingestion_lane_waiting() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO documents_ingestionlane AS lane (account_id, waiting, waiting_since)
    VALUES (NEW.account_id, true, now())
    ON CONFLICT (account_id) DO UPDATE SET waiting = true, waiting_since = now()
    WHERE NOT lane.waiting;
    RETURN NULL;
END $$;
CREATE TRIGGER documents_document_pending_insert AFTER INSERT ON documents_document
    FOR EACH ROW WHEN (NEW.status = 'pending') EXECUTE FUNCTION documents_ingestion_lane_waiting();
CREATE TRIGGER documents_document_pending_update AFTER UPDATE OF status ON documents_document
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION documents_ingestion_lane_waiting();
"""

REVERSE_TRIGGER_SQL = """
DROP TRIGGER IF EXISTS documents_document_pending_insert ON documents_document;
DROP TRIGGER IF EXISTS documents_document_pending_update ON documents_document;
DROP FUNCTION IF EXISTS documents_ingestion_lane_waiting();
"""

BACKFILL_SQL = """
INSERT INTO documents_ingestionlane (account_id, waiting, waiting_since, served_at)
SELECT account_id, bool_or(status = 'pending'), min(created_at) FILTER (WHERE status = 'pending'),
       max(claimed_at)
FROM documents_document GROUP BY account_id
ON CONFLICT (account_id) DO NOTHING
"""


def backfill(apps, schema_editor):
    with dangerously_bypass_tenancy(reason="migration documents.0013: every account's ingestion lane"):
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(BACKFILL_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_account_deleted_at"),
        ("documents", "0012_bounded_fulltext"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="activeembeddingmodel",
            options={},
        ),
        migrations.AlterModelOptions(
            name="chunkembedding",
            options={},
        ),
        migrations.CreateModel(
            name="IngestionLane",
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
            options={
                "indexes": [
                    models.Index(
                        models.OrderBy(models.F("served_at"), nulls_first=True),
                        models.F("waiting_since"),
                        models.F("account"),
                        condition=models.Q(("waiting", True)),
                        name="ingestion_lane_fairest",
                    )
                ],
            },
            managers=[
                ("all_accounts", django.db.models.manager.Manager()),
            ],
        ),
        enable_rls("documents_ingestionlane"),
        migrations.RunSQL(TRIGGER_SQL, reverse_sql=REVERSE_TRIGGER_SQL),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
