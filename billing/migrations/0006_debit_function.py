"""billing_debit(): a debit in one statement.

A debit used to be eight round trips from Python (SAVEPOINT, lock the balance row, look the
key up, INSERT, UPDATE, look the alert up, RELEASE, and the ORM building each of them),
about 5 ms of Python CPU a debit: eight spenders in a process were capped near 200/s by
the GIL, not by the database. This function does the same steps, in the same order, in
one call.

SECURITY INVOKER (the default): it runs as the app's role under the caller's signed
context, so every row it reads or writes passes the tables' row-level security policies
exactly as the ORM's statements did. A context of account B cannot debit account A: the
balance row is invisible to it and inserting one is refused by the policy's WITH CHECK.

Why plpgsql and not one CTE: under READ COMMITTED every statement of a CTE shares one
snapshot taken before the row lock is granted, so the key check could miss an entry that a
spender holding the lock committed meanwhile. Here each statement after the lock takes a
new snapshot and sees it, as the ORM path did; the unique index on (account, key) stays
the last guard.

It writes nothing unless it answers 'charged'. The other answers let billing.services
raise the same errors as before: 'existing' (the key was used: the entry's kind, delta and
tokens tell a retry from a conflict), 'insufficient', and 'budgeted' (the spender has a
budget: billing.services checks it in Python under the row lock this call already holds,
then calls again with p_budget_checked). `alert_due` says the low-balance alert must fire
(billing.alerts.low_balance_check, still under the lock, sends it once).
"""

from django.db import migrations

DEBIT_FUNCTION = """
CREATE OR REPLACE FUNCTION public.billing_debit(
    p_account_id bigint, p_key text, p_kind text, p_tokens bigint, p_model text, p_provider text,
    p_reference text, p_metadata jsonb, p_user_id bigint, p_api_key_id bigint, p_budget_checked boolean)
RETURNS TABLE (outcome text, balance bigint, alert_due boolean, entry_id bigint,
               entry_created_at timestamptz, entry_kind text, entry_delta bigint, entry_tokens bigint)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_balance bigint;
    v_entry record;
BEGIN
    -- Spenders of one account queue here until the holder commits.
    SELECT b.balance INTO v_balance FROM public.billing_accountbalance AS b
     WHERE b.account_id = p_account_id FOR UPDATE;
    IF NOT FOUND THEN
        -- NOTE: two first operations on a new account may race; ON CONFLICT lets both
        -- through and the lock below still serialises them.
        INSERT INTO public.billing_accountbalance (account_id, balance, updated_at)
        VALUES (p_account_id, 0, clock_timestamp()) ON CONFLICT (account_id) DO NOTHING;
        SELECT b.balance INTO STRICT v_balance FROM public.billing_accountbalance AS b
         WHERE b.account_id = p_account_id FOR UPDATE;
    END IF;

    SELECT e.id, e.created_at, e.kind, e.delta, e.tokens INTO v_entry
      FROM public.billing_creditledgerentry AS e
     WHERE e.account_id = p_account_id AND e.idempotency_key = p_key;
    IF FOUND THEN
        RETURN QUERY SELECT 'existing'::text, v_balance, false, v_entry.id, v_entry.created_at,
                            v_entry.kind::text, v_entry.delta, v_entry.tokens;
        RETURN;
    END IF;

    IF v_balance < p_tokens THEN
        RETURN QUERY SELECT 'insufficient'::text, v_balance, false, NULL::bigint, NULL::timestamptz,
                            NULL::text, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;

    IF NOT p_budget_checked AND (p_user_id IS NOT NULL OR p_api_key_id IS NOT NULL) AND EXISTS (
        SELECT 1 FROM public.billing_budget AS g
         WHERE g.account_id = p_account_id
           AND CASE WHEN p_api_key_id IS NOT NULL THEN g.api_key_id = p_api_key_id
                    ELSE g.user_id = p_user_id AND g.api_key_id IS NULL END) THEN
        RETURN QUERY SELECT 'budgeted'::text, v_balance, false, NULL::bigint, NULL::timestamptz,
                            NULL::text, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;

    v_balance := v_balance - p_tokens;
    INSERT INTO public.billing_creditledgerentry
        (account_id, delta, balance_after, kind, tokens, shortfall, model, provider, reference,
         idempotency_key, created_by_id, created_at, metadata, spent_by_user_id, spent_by_api_key_id)
    VALUES (p_account_id, -p_tokens, v_balance, p_kind, p_tokens, 0, p_model, p_provider, p_reference,
            p_key, NULL, clock_timestamp(), p_metadata, p_user_id, p_api_key_id)
    RETURNING id, created_at, kind, delta, tokens INTO v_entry;
    UPDATE public.billing_accountbalance AS b SET balance = v_balance, updated_at = v_entry.created_at
     WHERE b.account_id = p_account_id;

    RETURN QUERY SELECT 'charged'::text, v_balance, EXISTS (
        SELECT 1 FROM public.billing_billingsettings AS s
         WHERE s.account_id = p_account_id AND s.alert_armed AND s.low_balance_threshold > v_balance
           AND s.contact_email <> ''),
        v_entry.id, v_entry.created_at, v_entry.kind::text, v_entry.delta, v_entry.tokens;
END
$fn$;
"""

DROP_FUNCTION = """
DROP FUNCTION IF EXISTS public.billing_debit(bigint, text, text, bigint, text, text, text, jsonb, bigint, bigint,
                                             boolean);
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0005_billing_settings")]

    operations = [migrations.RunSQL(DEBIT_FUNCTION, reverse_sql=DROP_FUNCTION)]
