"""The soak's reconciliation (bench/soak.py `reconcile`): a ledger made through the billing
services that matches its usage passes; a chat debit no answer accounts for, an answer charged
other than its tokens, an open hold and a document left pending are each found."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from bench.soak import reconcile
from billing import references
from billing.models import Kind
from billing.services import credits_debit, credits_hold, hold_settle
from chat.tests.test_feedback import _turns
from core.tenancy import account_context
from documents.services import document_upload

pytestmark = pytest.mark.django_db


def _answered(account, tokens: int):
    """An answer that reports `tokens`, charged for them through a settled hold, as a turn is."""
    answer = _turns(account)[0]
    with account_context(account):
        answer.total_tokens, answer.credits_charged = tokens, tokens
        answer.save(update_fields=["total_tokens", "credits_charged"])
        hold = credits_hold(
            account=account,
            amount=500,
            key=f"chat:test-{answer.pk}",
            reference=references.conversation(answer.conversation_id),
        )
        hold_settle(hold=hold, used_tokens=tokens, kind=Kind.CHAT, model="m", reference=references.message(answer.pk))
    return answer


def test_a_ledger_matching_its_usage_reconciles(account_a, account_b):
    _answered(account_a, 120)
    result = reconcile([account_a.pk, account_b.pk], searches={})
    assert result["ok"], result["failures"]
    assert (result["chat_debits"], result["chat_tokens"], result["chat_credits"]) == (1, 120, 120)


def test_a_debit_without_usage_and_what_is_left_undone_are_found(account_a, account_b):
    answer = _answered(account_a, 120)
    with account_context(account_a):
        # A chat debit naming an answer that does not exist, and a second charge of a real one.
        credits_debit(account=account_a, tokens=40, key="stray-1", kind=Kind.CHAT, reference=references.message(10**9))
        credits_debit(
            account=account_a, tokens=7, key="stray-2", kind=Kind.CHAT, reference=references.message(answer.pk)
        )
        credits_hold(account=account_a, amount=100, key="chat:never-settled")
        document, _ = document_upload(
            account=account_a,
            actor=None,
            upload=SimpleUploadedFile("notes.md", b"# Notes\n\nSome text.", content_type="text/markdown"),
        )
    result = reconcile([account_a.pk, account_b.pk], searches={account_b.pk: 1})
    assert not result["ok"]
    failures = "\n".join(result["failures"])
    assert f"({references.message(10**9)}, 40 tokens): no such answer" in failures
    assert f"({references.message(answer.pk)}, 7 tokens): its answer reports 120 tokens" in failures
    assert f"answer {answer.pk} used 120 tokens, says 120 credits, charged 120" not in failures
    assert "1 open hold(s), e.g. chat:never-settled" in failures
    assert f"document {document.pk} still pending" in failures
    assert f"account {account_b.pk}: 0 search debits for 1 searches answered" in failures
    assert all(f"account {account_b.pk}" not in line or "search" in line for line in result["failures"])
