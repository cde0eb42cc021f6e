"""The cron job that gives large accounts their own HNSW index and takes it away again."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection

from core.tenancy import account_context
from documents.services import document_delete, document_upload
from retrieval.jobs import refresh_search_indexes
from retrieval.search import tenant_index_name


@pytest.fixture(autouse=True)
def _no_index_left_from_before():
    # Indexes are DDL, built on the owner's connection: a test database flush keeps them, so
    # an earlier test that stopped half way would leave one (dropped here: its rows are gone).
    refresh_search_indexes()


def _indexes() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'documents_chunk'")
        return {name for (name,) in cursor.fetchall()}


@pytest.mark.django_db(transaction=True)
def test_large_accounts_get_their_own_index_and_lose_it_when_they_shrink(
    account_a, account_b, fake_llm, run_jobs, django_capture_on_commit_callbacks, settings
):
    settings.SEARCH_TENANT_INDEX_MIN_CHUNKS = 4
    text = "\n\n".join(f"Section {i} explains topic {i} in plenty of words. " * 12 for i in range(12))
    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        document, _ = document_upload(
            account=account_a,
            actor=None,
            upload=SimpleUploadedFile("big.txt", text.encode(), content_type="text/plain"),
        )
    with account_context(account_b), django_capture_on_commit_callbacks(execute=True):
        document_upload(
            account=account_b,
            actor=None,
            upload=SimpleUploadedFile("small.txt", b"one short note", content_type="text/plain"),
        )
    run_jobs()

    assert refresh_search_indexes() == {account_a.pk: "created"}
    assert tenant_index_name(account_a.pk) in _indexes()
    assert tenant_index_name(account_b.pk) not in _indexes()
    assert refresh_search_indexes() == {account_a.pk: "exists"}

    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        document_delete(account=account_a, document=document)
    run_jobs()
    assert refresh_search_indexes() == {account_a.pk: "dropped"}
    assert tenant_index_name(account_a.pk) not in _indexes()


@pytest.mark.django_db(transaction=True)
def test_a_deleted_accounts_own_index_goes_with_it(
    account_a, owner_a, fake_llm, run_jobs, django_capture_on_commit_callbacks, settings
):
    """The index is retrieval's (retrieval/jobs.py answers account_deleted); documents' purge
    no longer names it."""
    from accounts.services import account_delete

    settings.SEARCH_TENANT_INDEX_MIN_CHUNKS = 4
    text = "\n\n".join(f"Section {i} explains topic {i} in plenty of words. " * 12 for i in range(12))
    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        document_upload(
            account=account_a,
            actor=None,
            upload=SimpleUploadedFile("big.txt", text.encode(), content_type="text/plain"),
        )
    run_jobs()
    assert refresh_search_indexes() == {account_a.pk: "created"}

    with account_context(account_a, user=owner_a), django_capture_on_commit_callbacks(execute=True):
        account_delete(account=account_a, actor=owner_a)
    run_jobs()
    assert tenant_index_name(account_a.pk) not in _indexes()
