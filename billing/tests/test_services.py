"""The ledger's rules, each enforced by the database or a service."""

import random

import pytest
from django.db import IntegrityError, ProgrammingError, connection, transaction
from django.db.models import Sum

from billing import references
from billing.errors import BillingError, IdempotencyConflict, InsufficientCredits
from billing.models import AccountBalance, CreditHold, CreditLedgerEntry, HoldStatus
from billing.selectors import balance_get, ingest_credits_require
from billing.services import credits_debit, credits_grant, credits_hold, hold_release, hold_settle
from core.tenancy import account_context


@pytest.fixture
def acct(account_a):
    with account_context(account_a):
        yield account_a


def _ledger_sum(account):
    return CreditLedgerEntry.objects.for_account(account).aggregate(s=Sum("delta"))["s"] or 0


def test_new_account_gets_signup_credits(acct, settings):
    assert balance_get(account=acct) == settings.SIGNUP_CREDITS == 10000
    entry = CreditLedgerEntry.objects.for_account(acct).get()
    assert entry.kind == "signup" and entry.delta == 10000


def test_debit_is_one_credit_per_token_and_idempotent(acct):
    first = credits_debit(
        account=acct,
        tokens=120,
        key="ingest:1:1",
        kind="embedding",
        model="m",
        provider="p",
        reference="document:1:rev1",
    )
    again = credits_debit(account=acct, tokens=120, key="ingest:1:1", kind="embedding")
    assert again.pk == first.pk and first.delta == -120 and first.tokens == 120
    assert balance_get(account=acct) == 10000 - 120
    assert CreditLedgerEntry.objects.for_account(acct).filter(idempotency_key="ingest:1:1").count() == 1


def test_reused_key_with_a_different_amount_is_refused(acct):
    credits_debit(account=acct, tokens=10, key="k1", kind="chat")
    with pytest.raises(IdempotencyConflict, match="a key names one operation"):
        credits_debit(account=acct, tokens=11, key="k1", kind="chat")
    with pytest.raises(IdempotencyConflict):
        credits_grant(account=acct, amount=10, reason="r", key="k1")
    assert balance_get(account=acct) == 9990


def test_insufficient_credits_writes_nothing_and_says_what_to_do(acct):
    entries = CreditLedgerEntry.objects.for_account(acct).count()
    with pytest.raises(InsufficientCredits) as exc:
        credits_debit(account=acct, tokens=10001, key="big", kind="chat")
    assert exc.value.code == "insufficient_credits" and exc.value.status == 402
    assert exc.value.message == "This needs about 10,001 credits; the account has 10,000. An owner can add credits."
    assert CreditLedgerEntry.objects.for_account(acct).count() == entries
    assert balance_get(account=acct) == 10000


@pytest.mark.parametrize("amount", [0, -5, 1.5, "10", None, True])
def test_bad_amounts_are_refused(acct, amount):
    if amount != 0:  # a call that used 0 tokens is valid and costs one credit (below)
        with pytest.raises(BillingError, match="zero or more"):
            credits_debit(account=acct, tokens=amount, key="x", kind="chat")
    with pytest.raises(BillingError, match="greater than zero"):
        credits_grant(account=acct, amount=amount, reason="r")
    with pytest.raises(BillingError):
        credits_hold(account=acct, amount=amount, key="h")
    assert CreditLedgerEntry.objects.for_account(acct).count() == 1


def test_every_provider_call_costs_at_least_one_credit(acct):
    entry = credits_debit(account=acct, tokens=0, key="q:0", kind="embedding")
    # The entry keeps what the provider reported (0 tokens) beside what it cost (1 credit).
    assert entry.delta == -1 and entry.tokens == 0 and balance_get(account=acct) == 9999


def test_ingestion_needs_the_minimum_and_the_estimate(acct, settings):
    settings.MIN_CREDITS_TO_INGEST = 100
    assert ingest_credits_require(account=acct) == 10000
    assert ingest_credits_require(account=acct, estimate=10000) == 10000
    with pytest.raises(InsufficientCredits) as exc:
        ingest_credits_require(account=acct, estimate=10001)
    assert exc.value.status == 402 and "10,001" in exc.value.message
    settings.MIN_CREDITS_TO_INGEST = 20000
    with pytest.raises(InsufficientCredits, match="20,000"):
        ingest_credits_require(account=acct, estimate=5)


def test_references_are_built_and_read_in_one_place():
    assert references.parse(references.document(12, 3)) == references.Reference("document", 12, 3)
    assert references.document(12, 3).startswith(references.document_prefix(12))
    assert not references.document(120, 1).startswith(references.document_prefix(12))
    assert references.parse(references.conversation(7)) == references.Reference("conversation", 7)
    assert references.parse(references.message(88)) == references.Reference("message", 88)
    assert references.parse(references.SEARCH) == references.Reference("search")
    for free_text in ("", None, "annual plan", "document:x:rev1", "message:1:extra"):
        assert references.parse(free_text) == references.Reference("")


def test_grant_needs_a_reason_and_records_it(acct, owner_a):
    with pytest.raises(BillingError, match="needs a reason"):
        credits_grant(account=acct, amount=5, reason="  ")
    entry = credits_grant(account=acct, amount=5, reason="support refund", actor=owner_a, key="g1")
    assert entry.metadata == {"reason": "support refund"} and entry.created_by == owner_a
    assert credits_grant(account=acct, amount=5, reason="support refund", key="g1").pk == entry.pk
    assert balance_get(account=acct) == 10005


def test_hold_then_settle_charges_exactly_what_was_used(acct):
    hold = credits_hold(account=acct, amount=1000, key="chat:1", reference="message:1")
    assert balance_get(account=acct) == 9000
    entry = hold_settle(hold=hold, used_tokens=321, model="smol", provider="local")
    assert entry.delta == -321 and entry.kind == "chat" and entry.shortfall == 0
    assert balance_get(account=acct) == 10000 - 321
    assert hold_settle(hold=hold, used_tokens=321).pk == entry.pk  # idempotent
    assert balance_get(account=acct) == 10000 - 321
    with pytest.raises(IdempotencyConflict):
        hold_settle(hold=hold, used_tokens=5)
    assert _ledger_sum(acct) == balance_get(account=acct)


def test_settle_more_than_held_charges_what_the_balance_allows(acct):
    credits_debit(account=acct, tokens=9000, key="spend", kind="embedding")
    hold = credits_hold(account=acct, amount=500, key="chat:2")
    entry = hold_settle(hold=hold, used_tokens=1500)
    assert entry.delta == -1000 and entry.tokens == 1500 and entry.shortfall == 500
    assert balance_get(account=acct) == 0


def test_hold_beyond_balance_is_refused(acct):
    with pytest.raises(InsufficientCredits):
        credits_hold(account=acct, amount=10001, key="h")
    assert not CreditHold.objects.for_account(acct).exists()


def test_hold_release_is_idempotent_and_blocks_settle(acct):
    hold = credits_hold(account=acct, amount=700, key="chat:3")
    hold_release(hold=hold)
    hold_release(hold=hold)
    assert balance_get(account=acct) == 10000
    assert CreditHold.objects.for_account(acct).get().status == HoldStatus.RELEASED
    with pytest.raises(BillingError, match="already released"):
        hold_settle(hold=hold, used_tokens=10)


def test_hold_key_reuse_returns_the_same_hold_or_is_refused(acct):
    hold = credits_hold(account=acct, amount=50, key="chat:4")
    assert credits_hold(account=acct, amount=50, key="chat:4").pk == hold.pk
    with pytest.raises(IdempotencyConflict):
        credits_hold(account=acct, amount=60, key="chat:4")
    assert balance_get(account=acct) == 9950


def test_sum_of_deltas_equals_balance_after_random_operations(acct):
    rng = random.Random(7)
    holds = []
    for i in range(200):
        op = rng.choice(["grant", "debit", "hold", "settle", "release", "retry"])
        try:
            if op == "grant":
                credits_grant(account=acct, amount=rng.randint(1, 500), reason="test", key=f"g{i}")
            elif op == "debit":
                credits_debit(account=acct, tokens=rng.randint(1, 800), key=f"d{i}", kind="chat")
            elif op == "hold":
                holds.append(credits_hold(account=acct, amount=rng.randint(1, 900), key=f"h{i}"))
            elif op == "settle" and holds:
                hold_settle(hold=holds.pop(rng.randrange(len(holds))), used_tokens=rng.randint(0, 1200))
            elif op == "release" and holds:
                hold_release(hold=holds.pop(rng.randrange(len(holds))))
            elif op == "retry":
                credits_debit(account=acct, tokens=5, key="same-every-time", kind="chat")
        except InsufficientCredits:
            pass
        balance = balance_get(account=acct)
        assert balance >= 0
        assert _ledger_sum(acct) == balance


def test_database_refuses_a_negative_balance(acct):
    with pytest.raises(IntegrityError, match="balance_never_negative"):
        with transaction.atomic():
            AccountBalance.objects.for_account(acct).update(balance=-1)


def test_database_refuses_updates_and_deletes_of_ledger_rows(acct):
    entry = CreditLedgerEntry.objects.for_account(acct).get()
    with pytest.raises(ProgrammingError, match="append-only"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE billing_creditledgerentry SET delta = 1000000 WHERE id = %s", [entry.pk])
    with pytest.raises(ProgrammingError, match="append-only"):
        with transaction.atomic():
            CreditLedgerEntry.objects.for_account(acct).filter(pk=entry.pk).delete()
    assert CreditLedgerEntry.objects.for_account(acct).get().delta == 10000


def test_ledger_is_isolated_between_accounts(account_a, account_b):
    with account_context(account_b):
        assert balance_get(account=account_a) == 0
        assert CreditLedgerEntry.objects.for_account(account_a).count() == 0
        with pytest.raises(ProgrammingError, match="row-level security"):
            with transaction.atomic():
                credits_grant(account=account_a, amount=1, reason="sneaky")


def test_no_code_outside_billing_writes_ledger_rows():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if rel.parts[0] in ("billing", ".venv", ".data") or "tests" in rel.parts:
            continue
        text = path.read_text(errors="ignore")
        if "CreditLedgerEntry" in text or "AccountBalance" in text and ".update(" in text:
            offenders.append(str(rel))
    assert offenders == []


def test_take_back_is_capped_at_the_balance_and_idempotent_by_key(account_a):
    from billing.services import credits_take_back

    with account_context(account_a):
        balance = balance_get(account=account_a)
        entry = credits_take_back(account=account_a, amount=balance + 5_000, key="refund:1", reason="refund")
        assert entry.delta == -balance and entry.kind == "adjustment" and balance_get(account=account_a) == 0
        assert entry.metadata == {"reason": "refund", "asked": balance + 5_000}
        again = credits_take_back(account=account_a, amount=balance + 5_000, key="refund:1", reason="refund")
        assert again.pk == entry.pk and balance_get(account=account_a) == 0
        assert credits_take_back(account=account_a, amount=10, key="refund:2", reason="refund") is None
        credits_grant(account=account_a, amount=100, reason="tests", key="grant:after")
        with pytest.raises(IdempotencyConflict):  # a grant's key is not a take-back's
            credits_take_back(account=account_a, amount=10, key="grant:after", reason="refund")
        with pytest.raises(BillingError):
            credits_take_back(account=account_a, amount=0, key="refund:3", reason="refund")
        with pytest.raises(BillingError):
            credits_take_back(account=account_a, amount=10, key="refund:4", reason=" ")
        assert balance_get(account=account_a) == 100
