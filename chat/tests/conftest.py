import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from core.tenancy import account_context
from documents.services import document_upload

HANDBOOK = ("# Holidays\n\nEveryone at Acme has twenty-eight days of paid holiday a year. Unused holiday "
            "carries over until March.\n\n# Laptops\n\nNew starters receive a laptop and a badge on day one.")


@pytest.fixture
def ingest_text(fake_llm, run_jobs, django_capture_on_commit_callbacks):
    """Put a text document into an account's knowledge base through the real pipeline."""
    def go(account, name, text):
        with account_context(account), django_capture_on_commit_callbacks(execute=True):
            document, _ = document_upload(account=account, actor=None,
                                          upload=SimpleUploadedFile(name, text.encode(), content_type="text/plain"))
        run_jobs()
        return document
    return go


@pytest.fixture
def handbook(account_a, ingest_text):
    return ingest_text(account_a, "handbook.md", HANDBOOK)
