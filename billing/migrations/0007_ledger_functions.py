"""Every ledger operation written once, as SQL functions.

Before this, each operation existed twice: a fast SQL text in billing.services (_HOLD_SQL,
_CLOSE_SQL) or billing_debit (0006), and an ORM twin for the cases the fast text did not
cover (a budgeted spender, a key used before, a swept hold), with the ledger entry's column
list spelt out in three SQL texts. Now billing.services calls one function per operation
and each of them decides every case itself:

- billing_debit (replaces 0006's): an ordinary debit, or one drawn from an open hold.
- billing_hold: reserve credits.
- billing_hold_close: settle or release a hold, recording its draws first.
- billing_grant: add credits.

They share four helpers: billing_balance_lock (every operation takes the account's balance
row lock first, then the hold's: the one order, so spenders queue and never deadlock),
billing_entry_append (the one INSERT of a ledger entry), billing_budgeted and
billing_alert_due. The helpers have no SET search_path of their own: they are called from
the four functions, which pin it, and a SET would cost each call a configuration save and
restore (and keep the SQL ones from being inlined); every name in them is schema-qualified.

Amounts are credits; `tokens` are what the provider reported. billing.pricing turns the one
into the other before the call: the ledger keeps both, so they may differ.

SECURITY INVOKER (the default), as billing_debit was: they run as the app's role under the
caller's signed context, and every row they read or write passes row-level security. Each
is plpgsql so that every statement after the lock takes a new snapshot (READ COMMITTED) and
sees what the previous holder of the lock committed: the key checks are exact, and the
unique indexes stay the last guard. A function answers with an `outcome` and writes nothing
unless the outcome says it did; billing.services turns the others into errors.
Budgets are checked in Python (billing.budgets) under the lock the first call took: a call
answers 'budgeted' and is made again with p_budget_checked once the budget allowed it.
"""

from django.db import migrations, models

HELPERS = """
CREATE FUNCTION public.billing_balance_lock(p_account_id bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $fn$
DECLARE
    v_balance bigint;
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
    RETURN v_balance;
END
$fn$;

-- The one INSERT of a ledger entry (the only place its column list is written).
CREATE FUNCTION public.billing_entry_append(
    p_account_id bigint, p_delta bigint, p_balance_after bigint, p_kind text, p_tokens bigint, p_shortfall bigint,
    p_model text, p_provider text, p_reference text, p_key text, p_metadata jsonb, p_user_id bigint,
    p_api_key_id bigint, p_created_by_id bigint)
RETURNS TABLE (id bigint, created_at timestamptz)
LANGUAGE sql VOLATILE SECURITY INVOKER
AS $fn$
    INSERT INTO public.billing_creditledgerentry
        (account_id, delta, balance_after, kind, tokens, shortfall, model, provider, reference, idempotency_key,
         created_by_id, created_at, metadata, spent_by_user_id, spent_by_api_key_id)
    VALUES (p_account_id, p_delta, p_balance_after, p_kind, p_tokens, p_shortfall, p_model, p_provider, p_reference,
            p_key, p_created_by_id, clock_timestamp(), p_metadata, p_user_id, p_api_key_id)
    RETURNING id, created_at;
$fn$;

-- The armed low-balance alert must fire (billing.alerts.low_balance_check sends it once).
CREATE FUNCTION public.billing_alert_due(p_account_id bigint, p_balance bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY INVOKER
AS $fn$
    SELECT EXISTS (SELECT 1 FROM public.billing_billingsettings AS s
                    WHERE s.account_id = p_account_id AND s.alert_armed AND s.low_balance_threshold > p_balance
                      AND s.contact_email <> '');
$fn$;

-- The spender has a budget (billing.budgets checks it, under the lock, before the second call).
CREATE FUNCTION public.billing_budgeted(p_account_id bigint, p_user_id bigint, p_api_key_id bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY INVOKER
AS $fn$
    SELECT (p_user_id IS NOT NULL OR p_api_key_id IS NOT NULL) AND EXISTS (
        SELECT 1 FROM public.billing_budget AS g
         WHERE g.account_id = p_account_id
           AND CASE WHEN p_api_key_id IS NOT NULL THEN g.api_key_id = p_api_key_id
                    ELSE g.user_id = p_user_id AND g.api_key_id IS NULL END);
$fn$;
"""

# Outcomes: 'existing' (the key was used: the entry's kind and tokens tell a retry from a
# conflict), 'drawn' (from the open hold p_hold_id: the hold shrinks, the balance and every
# budget's spend stay as they were, nothing is checked), 'insufficient', 'budgeted',
# 'charged'. The entry's spender is the hold's when drawn, else the caller's.
DEBIT = """
CREATE FUNCTION public.billing_debit(
    p_account_id bigint, p_key text, p_kind text, p_tokens bigint, p_credits bigint, p_model text,
    p_provider text, p_reference text, p_metadata jsonb, p_user_id bigint, p_api_key_id bigint, p_hold_id bigint,
    p_budget_checked boolean)
RETURNS TABLE (outcome text, balance bigint, alert_due boolean, entry_id bigint, entry_created_at timestamptz,
               entry_kind text, entry_delta bigint, entry_tokens bigint, entry_user_id bigint,
               entry_api_key_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_balance bigint := public.billing_balance_lock(p_account_id);
    v_entry record;
    v_hold record;
BEGIN
    SELECT e.id, e.created_at, e.kind, e.delta, e.tokens, e.spent_by_user_id, e.spent_by_api_key_id INTO v_entry
      FROM public.billing_creditledgerentry AS e
     WHERE e.account_id = p_account_id AND e.idempotency_key = p_key;
    IF FOUND THEN
        RETURN QUERY SELECT 'existing'::text, v_balance, false, v_entry.id, v_entry.created_at, v_entry.kind::text,
                            v_entry.delta, v_entry.tokens, v_entry.spent_by_user_id, v_entry.spent_by_api_key_id;
        RETURN;
    END IF;

    IF p_hold_id IS NOT NULL THEN
        SELECT h.amount, h.reference, h.spent_by_user_id, h.spent_by_api_key_id INTO v_hold
          FROM public.billing_credithold AS h
         WHERE h.id = p_hold_id AND h.account_id = p_account_id AND h.status = 'open' FOR UPDATE;
        -- A hold keeps at least one credit until it is settled; one too small is not drawn from.
        IF FOUND AND v_hold.amount > p_credits THEN
            -- NOTE: the hold's amount is what is still reserved; a retried hold is compared with
            -- it, and a turn's hold is never retried with its key.
            UPDATE public.billing_credithold AS h SET amount = h.amount - p_credits WHERE h.id = p_hold_id;
            PERFORM public.billing_entry_append(p_account_id, p_credits, v_balance + p_credits, 'hold_release', 0, 0,
                                                '', '', v_hold.reference, p_key || ':from-hold', '{}'::jsonb,
                                                v_hold.spent_by_user_id, v_hold.spent_by_api_key_id, NULL);
            SELECT a.id, a.created_at INTO v_entry
              FROM public.billing_entry_append(p_account_id, -p_credits, v_balance, p_kind, p_tokens, 0, p_model,
                                               p_provider, p_reference, p_key, p_metadata, v_hold.spent_by_user_id,
                                               v_hold.spent_by_api_key_id, NULL) AS a;
            RETURN QUERY SELECT 'drawn'::text, v_balance, false, v_entry.id, v_entry.created_at, p_kind, -p_credits,
                                p_tokens, v_hold.spent_by_user_id, v_hold.spent_by_api_key_id;
            RETURN;
        END IF;
    END IF;

    IF v_balance < p_credits THEN
        RETURN QUERY SELECT 'insufficient'::text, v_balance, false, NULL::bigint, NULL::timestamptz, NULL::text,
                            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    IF NOT p_budget_checked AND public.billing_budgeted(p_account_id, p_user_id, p_api_key_id) THEN
        RETURN QUERY SELECT 'budgeted'::text, v_balance, false, NULL::bigint, NULL::timestamptz, NULL::text,
                            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;

    v_balance := v_balance - p_credits;
    SELECT a.id, a.created_at INTO v_entry
      FROM public.billing_entry_append(p_account_id, -p_credits, v_balance, p_kind, p_tokens, 0, p_model, p_provider,
                                       p_reference, p_key, p_metadata, p_user_id, p_api_key_id, NULL) AS a;
    UPDATE public.billing_accountbalance AS b SET balance = v_balance, updated_at = v_entry.created_at
     WHERE b.account_id = p_account_id;
    RETURN QUERY SELECT 'charged'::text, v_balance, public.billing_alert_due(p_account_id, v_balance), v_entry.id,
                        v_entry.created_at, p_kind, -p_credits, p_tokens, p_user_id, p_api_key_id;
END
$fn$;
"""

# Outcomes: 'existing' (a hold with this key: its id and amount tell a retry from a
# conflict), 'insufficient', 'budgeted', 'held'.
HOLD = """
CREATE FUNCTION public.billing_hold(
    p_account_id bigint, p_key text, p_amount bigint, p_reference text, p_user_id bigint, p_api_key_id bigint,
    p_budget_checked boolean)
RETURNS TABLE (outcome text, balance bigint, hold_id bigint, hold_amount bigint, hold_created_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_balance bigint := public.billing_balance_lock(p_account_id);
    v_hold record;
BEGIN
    SELECT h.id, h.amount, h.created_at INTO v_hold FROM public.billing_credithold AS h
     WHERE h.account_id = p_account_id AND h.key = p_key;
    IF FOUND THEN
        RETURN QUERY SELECT 'existing'::text, v_balance, v_hold.id, v_hold.amount, v_hold.created_at;
        RETURN;
    END IF;
    IF v_balance < p_amount THEN
        RETURN QUERY SELECT 'insufficient'::text, v_balance, NULL::bigint, NULL::bigint, NULL::timestamptz;
        RETURN;
    END IF;
    IF NOT p_budget_checked AND public.billing_budgeted(p_account_id, p_user_id, p_api_key_id) THEN
        RETURN QUERY SELECT 'budgeted'::text, v_balance, NULL::bigint, NULL::bigint, NULL::timestamptz;
        RETURN;
    END IF;

    v_balance := v_balance - p_amount;
    PERFORM public.billing_entry_append(p_account_id, -p_amount, v_balance, 'hold', 0, 0, '', '', p_reference, p_key,
                                        '{}'::jsonb, p_user_id, p_api_key_id, NULL);
    INSERT INTO public.billing_credithold (account_id, key, amount, status, reference, used_tokens, created_at,
                                           closed_at, spent_by_user_id, spent_by_api_key_id)
    VALUES (p_account_id, p_key, p_amount, 'open', p_reference, NULL, clock_timestamp(), NULL, p_user_id,
            p_api_key_id)
    RETURNING id, amount, created_at INTO v_hold;
    UPDATE public.billing_accountbalance AS b SET balance = v_balance, updated_at = v_hold.created_at
     WHERE b.account_id = p_account_id;
    RETURN QUERY SELECT 'held'::text, v_balance, v_hold.id, v_hold.amount, v_hold.created_at;
END
$fn$;
"""

# Settle (p_status 'settled': charge p_credits for p_used_tokens) or release ('released') a
# hold, after recording p_draws (a JSON array of {key, kind, tokens, credits, model,
# provider, reference, metadata}: the charges made in the hold's name), each as
# billing_debit(p_hold_id) records it. A draw the hold cannot cover (it was swept, or is too
# small) is an ordinary charge, never refused: the call was made; past the balance it is
# charged what the balance allows and its shortfall recorded, as a settle's charge is.
# Outcomes, all but the last writing nothing: 'missing' (no such hold in this account),
# 'existing' (settled before: its used_tokens tell a retry from a conflict), 'closed'
# (released: cannot be settled), 'draw_conflict' (a draw's key names another operation:
# that key and its entry's kind and delta), 'done' (closed by this call; for a release, also
# a hold that was closed already, once its draws are recorded).
CLOSE = """
CREATE FUNCTION public.billing_hold_close(
    p_account_id bigint, p_hold_id bigint, p_status text, p_used_tokens bigint, p_credits bigint, p_kind text,
    p_model text, p_provider text, p_reference text, p_metadata jsonb, p_draws jsonb)
RETURNS TABLE (outcome text, balance bigint, alert_due boolean, hold_status text, hold_amount bigint,
               hold_used_tokens bigint, hold_closed_at timestamptz, entry_id bigint, entry_created_at timestamptz,
               entry_delta bigint, entry_shortfall bigint, conflict_key text, conflict_kind text,
               conflict_delta bigint)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_balance bigint := public.billing_balance_lock(p_account_id);
    v_hold record;
    v_draw jsonb;
    v_spent record;
    v_conflict record;
    v_charged bigint;
    v_entry_id bigint;
    v_entry_at timestamptz;
    v_closed_at timestamptz;
BEGIN
    SELECT h.status, h.used_tokens, h.amount, h.closed_at, h.key, h.reference, h.spent_by_user_id,
           h.spent_by_api_key_id INTO v_hold
      FROM public.billing_credithold AS h WHERE h.id = p_hold_id AND h.account_id = p_account_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'missing'::text, v_balance, false, NULL::text, NULL::bigint, NULL::bigint,
                            NULL::timestamptz, NULL::bigint, NULL::timestamptz, NULL::bigint, NULL::bigint,
                            NULL::text, NULL::text, NULL::bigint;
        RETURN;
    END IF;
    IF p_status = 'settled' AND v_hold.status <> 'open' THEN
        RETURN QUERY SELECT (CASE WHEN v_hold.status = 'settled' THEN 'existing' ELSE 'closed' END)::text, v_balance,
                            false, v_hold.status::text, v_hold.amount, v_hold.used_tokens, v_hold.closed_at,
                            NULL::bigint, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::text, NULL::text,
                            NULL::bigint;
        RETURN;
    END IF;
    SELECT d->>'key' AS key, e.kind, e.delta INTO v_conflict
      FROM jsonb_array_elements(p_draws) AS d
      JOIN public.billing_creditledgerentry AS e ON e.account_id = p_account_id AND e.idempotency_key = d->>'key'
     WHERE e.kind <> d->>'kind' OR e.tokens <> (d->>'tokens')::bigint
     LIMIT 1;
    IF FOUND THEN
        RETURN QUERY SELECT 'draw_conflict'::text, v_balance, false, v_hold.status::text, v_hold.amount,
                            v_hold.used_tokens, v_hold.closed_at, NULL::bigint, NULL::timestamptz, NULL::bigint,
                            NULL::bigint, v_conflict.key, v_conflict.kind::text, v_conflict.delta;
        RETURN;
    END IF;

    FOR v_draw IN SELECT d FROM jsonb_array_elements(p_draws) AS d LOOP
        SELECT * INTO v_spent FROM public.billing_debit(
            p_account_id, v_draw->>'key', v_draw->>'kind', (v_draw->>'tokens')::bigint, (v_draw->>'credits')::bigint,
            v_draw->>'model', v_draw->>'provider', v_draw->>'reference', v_draw->'metadata', v_hold.spent_by_user_id,
            v_hold.spent_by_api_key_id, p_hold_id, true);
        IF v_spent.outcome = 'insufficient' THEN
            v_charged := LEAST((v_draw->>'credits')::bigint, v_spent.balance);
            PERFORM public.billing_entry_append(
                p_account_id, -v_charged, v_spent.balance - v_charged, v_draw->>'kind', (v_draw->>'tokens')::bigint,
                (v_draw->>'credits')::bigint - v_charged, v_draw->>'model', v_draw->>'provider',
                v_draw->>'reference', v_draw->>'key', v_draw->'metadata', v_hold.spent_by_user_id,
                v_hold.spent_by_api_key_id, NULL);
            UPDATE public.billing_accountbalance AS b SET balance = b.balance - v_charged, updated_at = clock_timestamp()
             WHERE b.account_id = p_account_id;
        END IF;
    END LOOP;

    SELECT h.status, h.used_tokens, h.amount, h.closed_at INTO v_spent
      FROM public.billing_credithold AS h WHERE h.id = p_hold_id;
    SELECT b.balance INTO v_balance FROM public.billing_accountbalance AS b WHERE b.account_id = p_account_id;
    IF v_spent.status <> 'open' THEN  -- a release of a closed hold: its draws were all there was to do
        RETURN QUERY SELECT 'done'::text, v_balance, public.billing_alert_due(p_account_id, v_balance),
                            v_spent.status::text, v_spent.amount, v_spent.used_tokens, v_spent.closed_at,
                            NULL::bigint, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::text, NULL::text,
                            NULL::bigint;
        RETURN;
    END IF;

    v_balance := v_balance + v_spent.amount;
    PERFORM public.billing_entry_append(p_account_id, v_spent.amount, v_balance, 'hold_release', 0, 0, '', '',
                                        v_hold.reference, v_hold.key || ':release', '{}'::jsonb,
                                        v_hold.spent_by_user_id, v_hold.spent_by_api_key_id, NULL);
    -- NOTE: settling is never refused by a budget: the call was made. Usage above the hold
    -- (rare: the hold is the worst case) may pass the cap; the spender's next hold is refused.
    IF p_status = 'settled' AND p_used_tokens > 0 THEN
        v_charged := LEAST(p_credits, v_balance);
        v_balance := v_balance - v_charged;
        SELECT a.id, a.created_at INTO v_entry_id, v_entry_at
          FROM public.billing_entry_append(p_account_id, -v_charged, v_balance, p_kind, p_used_tokens,
                                           p_credits - v_charged, p_model, p_provider,
                                           COALESCE(NULLIF(p_reference, ''), v_hold.reference),
                                           v_hold.key || ':charge', p_metadata, v_hold.spent_by_user_id,
                                           v_hold.spent_by_api_key_id, NULL) AS a;
    END IF;
    UPDATE public.billing_credithold AS h
       SET status = p_status, used_tokens = CASE WHEN p_status = 'settled' THEN p_used_tokens ELSE 0 END,
           closed_at = clock_timestamp()
     WHERE h.id = p_hold_id
    RETURNING h.closed_at INTO v_closed_at;
    UPDATE public.billing_accountbalance AS b SET balance = v_balance, updated_at = clock_timestamp()
     WHERE b.account_id = p_account_id;
    RETURN QUERY SELECT 'done'::text, v_balance, public.billing_alert_due(p_account_id, v_balance), p_status,
                        v_spent.amount, CASE WHEN p_status = 'settled' THEN p_used_tokens ELSE 0 END, v_closed_at,
                        v_entry_id, v_entry_at, -v_charged, p_credits - v_charged, NULL::text, NULL::text,
                        NULL::bigint;
END
$fn$;
"""

# Outcomes: 'existing' (the key was used: kind and delta tell a retry from a conflict), 'granted'.
GRANT = """
CREATE FUNCTION public.billing_grant(
    p_account_id bigint, p_key text, p_kind text, p_amount bigint, p_reference text, p_metadata jsonb,
    p_created_by_id bigint)
RETURNS TABLE (outcome text, balance bigint, entry_id bigint, entry_created_at timestamptz, entry_kind text,
               entry_delta bigint)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_balance bigint := public.billing_balance_lock(p_account_id);
    v_entry record;
BEGIN
    SELECT e.id, e.created_at, e.kind, e.delta INTO v_entry FROM public.billing_creditledgerentry AS e
     WHERE e.account_id = p_account_id AND e.idempotency_key = p_key;
    IF FOUND THEN
        RETURN QUERY SELECT 'existing'::text, v_balance, v_entry.id, v_entry.created_at, v_entry.kind::text,
                            v_entry.delta;
        RETURN;
    END IF;
    v_balance := v_balance + p_amount;
    SELECT a.id, a.created_at INTO v_entry
      FROM public.billing_entry_append(p_account_id, p_amount, v_balance, p_kind, 0, 0, '', '', p_reference, p_key,
                                       p_metadata, NULL, NULL, p_created_by_id) AS a;
    UPDATE public.billing_accountbalance AS b SET balance = v_balance, updated_at = v_entry.created_at
     WHERE b.account_id = p_account_id;
    RETURN QUERY SELECT 'granted'::text, v_balance, v_entry.id, v_entry.created_at, p_kind, p_amount;
END
$fn$;
"""

OLD_DEBIT = "public.billing_debit(bigint, text, text, bigint, text, text, text, jsonb, bigint, bigint, boolean)"

DROP = """
DROP FUNCTION IF EXISTS public.billing_grant(bigint, text, text, bigint, text, jsonb, bigint);
DROP FUNCTION IF EXISTS public.billing_hold_close(bigint, bigint, text, bigint, bigint, text, text, text, text, jsonb,
                                                  jsonb);
DROP FUNCTION IF EXISTS public.billing_hold(bigint, text, bigint, text, bigint, bigint, boolean);
DROP FUNCTION IF EXISTS public.billing_debit(bigint, text, text, bigint, bigint, text, text, text, jsonb, bigint,
                                             bigint, bigint, boolean);
DROP FUNCTION IF EXISTS public.billing_budgeted(bigint, bigint, bigint);
DROP FUNCTION IF EXISTS public.billing_alert_due(bigint, bigint);
DROP FUNCTION IF EXISTS public.billing_entry_append(bigint, bigint, bigint, text, bigint, bigint, text, text, text,
                                                    text, jsonb, bigint, bigint, bigint);
DROP FUNCTION IF EXISTS public.billing_balance_lock(bigint);
"""


def _old_debit(apps, schema_editor):
    """Going back: 0006's billing_debit as it was (its migration's text, not a copy)."""
    import importlib

    previous = importlib.import_module("billing.migrations.0006_debit_function")
    schema_editor.execute(previous.DEBIT_FUNCTION)


class Migration(migrations.Migration):
    dependencies = [("billing", "0006_debit_function")]

    operations = [
        migrations.RunSQL(f"DROP FUNCTION IF EXISTS {OLD_DEBIT};", reverse_sql=migrations.RunSQL.noop),
        migrations.RunPython(migrations.RunPython.noop, _old_debit),
        migrations.RunSQL(HELPERS + DEBIT + HOLD + CLOSE + GRANT, reverse_sql=DROP),
        migrations.AlterField(
            model_name="creditledgerentry",
            name="shortfall",
            field=models.BigIntegerField(default=0, help_text="Credits used that the balance could not cover"),
        ),
        migrations.AlterField(
            model_name="creditledgerentry",
            name="delta",
            field=models.BigIntegerField(help_text="Signed change to the balance, in credits (billing.pricing)"),
        ),
    ]
