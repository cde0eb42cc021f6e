from django.db import migrations

from core.rls import enable_rls

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION billing_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the credit ledger is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON billing_creditledgerentry
    FOR EACH ROW EXECUTE FUNCTION billing_ledger_append_only();
"""
DROP_APPEND_ONLY = """
DROP TRIGGER IF EXISTS ledger_append_only ON billing_creditledgerentry;
DROP FUNCTION IF EXISTS billing_ledger_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [
        enable_rls("billing_accountbalance"),
        enable_rls("billing_creditledgerentry"),
        enable_rls("billing_credithold"),
        migrations.RunSQL(APPEND_ONLY, reverse_sql=DROP_APPEND_ONLY),
    ]
