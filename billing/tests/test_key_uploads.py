"""A document uploaded with an API key is the key's: its ingestion and reindexing are charged
to the key (never its creator) and limited by the key's budget, like a member's uploads."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts.services import api_key_create
from billing.budgets import budget_set, budget_status_for
from billing.models import CreditLedgerEntry
from core.tenancy import account_context
from documents.models import Document

LONG_TEXT = " ".join(
    f"Paragraph {i} of the employee handbook covers travel, expenses and holidays." for i in range(80)
).encode()


@pytest.fixture
def key_a(account_a, owner_a):
    with account_context(account_a):
        key, raw = api_key_create(account=account_a, actor=owner_a, name="sync")
    key.raw = raw
    return key


def _upload_with_key(client, key, name, data, run_jobs, capture):
    with capture(execute=True):
        response = client.post(
            "/api/v1/documents/",
            {"file": SimpleUploadedFile(name, data, content_type="text/plain")},
            HTTP_AUTHORIZATION=f"Bearer {key.raw}",
        )
    assert response.status_code == 202, response.content
    run_jobs()
    return response.json()["id"]


def _document(account, document_id):
    with account_context(account):
        return Document.objects.for_account(account).get(pk=document_id)


def _embedding_entries(account):
    with account_context(account):
        return list(CreditLedgerEntry.objects.for_account(account).filter(kind="embedding").order_by("pk"))


def test_a_key_upload_records_the_key_and_its_ingestion_is_charged_to_the_key(
    client, account_a, owner_a, key_a, fake_llm, run_jobs, django_capture_on_commit_callbacks
):
    with account_context(account_a):
        budget_set(account=account_a, actor=owner_a, period="day", limit=1_000_000, api_key_id=key_a.pk)
    document_id = _upload_with_key(
        client, key_a, "notes.txt", b"Badges are collected at reception.", run_jobs, django_capture_on_commit_callbacks
    )
    document = _document(account_a, document_id)
    assert document.status == "ready"
    assert (document.uploaded_by_id, document.uploaded_by_api_key_id) == (None, key_a.pk)
    [entry] = _embedding_entries(account_a)
    # The key's creator (owner_a) pays nothing: the key does.
    assert (entry.spent_by_api_key_id, entry.spent_by_user_id) == (key_a.pk, None)
    with account_context(account_a):
        [status] = budget_status_for(account=account_a, api_key=key_a)
        assert status.spent == -entry.delta
        assert budget_status_for(account=account_a, user=owner_a) == []


def test_a_key_uploads_reindex_is_charged_to_the_key(
    client, client_a, account_a, key_a, fake_llm, run_jobs, django_capture_on_commit_callbacks
):
    document_id = _upload_with_key(
        client, key_a, "notes.txt", b"Badges are collected at reception.", run_jobs, django_capture_on_commit_callbacks
    )
    # The owner (a person) reindexes it: still the uploader's, the key's, to pay.
    with django_capture_on_commit_callbacks(execute=True):
        assert client_a.post(f"/api/v1/documents/{document_id}/reindex/").status_code == 202
    run_jobs()
    assert _document(account_a, document_id).status == "ready"
    entries = _embedding_entries(account_a)
    assert len(entries) == 2
    assert {(e.spent_by_api_key_id, e.spent_by_user_id) for e in entries} == {(key_a.pk, None)}


def test_a_key_uploads_ingestion_is_limited_by_the_keys_budget(
    client, account_a, owner_a, key_a, fake_llm, run_jobs, django_capture_on_commit_callbacks
):
    # Enough for the upload's minimum (100), not for the long document's embedding.
    with account_context(account_a):
        budget_set(account=account_a, actor=owner_a, period="day", limit=150, api_key_id=key_a.pk)
    big = _document(
        account_a, _upload_with_key(client, key_a, "big.txt", LONG_TEXT, run_jobs, django_capture_on_commit_callbacks)
    )
    assert big.status == "failed" and big.error_code == "budget_exceeded"
    assert big.error.startswith("This API key's daily budget of 150 credits")
    assert _embedding_entries(account_a) == []
    # The key's creator has no budget and was not asked to pay instead.
    small = _document(
        account_a,
        _upload_with_key(
            client, key_a, "small.txt", b"Badges are at reception.", run_jobs, django_capture_on_commit_callbacks
        ),
    )
    assert small.status == "ready"
    [entry] = _embedding_entries(account_a)
    assert entry.spent_by_api_key_id == key_a.pk


def test_a_members_upload_records_no_key(
    client_a, account_a, owner_a, fake_llm, run_jobs, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client_a.post(
            "/api/v1/documents/",
            {"file": SimpleUploadedFile("m.txt", b"Parking is behind the office.", content_type="text/plain")},
        )
    run_jobs()
    document = _document(account_a, response.json()["id"])
    assert (document.uploaded_by_id, document.uploaded_by_api_key_id) == (owner_a.pk, None)
    [entry] = _embedding_entries(account_a)
    assert (entry.spent_by_user_id, entry.spent_by_api_key_id) == (owner_a.pk, None)
