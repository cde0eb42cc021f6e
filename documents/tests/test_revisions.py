"""A document's file replaced by a new version (documents/revisions.py): the same document at
its next revision, the old chunks answering until the new ones are published, charged once."""

from django.core.files.uploadedfile import SimpleUploadedFile

from billing.models import CreditLedgerEntry
from core.tenancy import account_context
from documents.models import Chunk, Document
from documents.revisions import document_content_replace
from documents.services import document_delete


def _upload(name, text):
    return SimpleUploadedFile(name, text.encode(), content_type="text/markdown")


def test_new_content_is_the_next_revision_of_the_same_document(
    account_a, fake_llm, upload_and_ingest, run_jobs, django_capture_on_commit_callbacks
):
    document = upload_and_ingest(account_a, "leave.md", b"# Leave\n\nTwenty-eight days a year.", "text/markdown")
    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        replaced = document_content_replace(
            account=account_a, document=document, upload=_upload("Leave policy.md", "# Leave\n\nThirty days a year.")
        )
        assert replaced.pk == document.pk and replaced.revision == 2 and replaced.status == "pending"
        # Until the new revision is published, search still has the old chunks.
        assert "Twenty-eight" in Chunk.objects.for_account(account_a).get(document=document).content
    run_jobs()
    with account_context(account_a):
        document = Document.objects.for_account(account_a).get(pk=document.pk)
        assert document.status == "ready" and document.name == "Leave policy.md"
        assert "Thirty days" in Chunk.objects.for_account(account_a).get(document=document).content
        keys = list(
            CreditLedgerEntry.objects.for_account(account_a)
            .filter(kind="embedding")
            .values_list("idempotency_key", flat=True)
        )
    assert sorted(keys) == [f"ingest:{document.pk}:1", f"ingest:{document.pk}:2"]


def test_bytes_another_document_has_are_refused_with_none(account_a, fake_llm, upload_and_ingest):
    first = upload_and_ingest(account_a, "a.md", b"# A\n\nThe same text.", "text/markdown")
    second = upload_and_ingest(account_a, "b.md", b"# B\n\nOther text.", "text/markdown")
    with account_context(account_a):
        assert (
            document_content_replace(
                account=account_a, document=second, upload=_upload("b.md", "# A\n\nThe same text.")
            )
            is None
        )
        assert Document.objects.for_account(account_a).get(pk=second.pk).revision == 1
    assert first.pk != second.pk


def test_a_document_being_deleted_is_left_alone(account_a, fake_llm, upload_and_ingest):
    document = upload_and_ingest(account_a, "gone.md", b"# Gone\n\nSoon.", "text/markdown")
    with account_context(account_a):
        document_delete(account=account_a, document=document)
        result = document_content_replace(account=account_a, document=document, upload=_upload("gone.md", "New"))
        assert result.status == "deleting" and result.revision == 1
