"""Words that match the product: the picker and the getting-started text come
from the kinds registry, a page where tokens and credits differ says why with the model's
price, and counts read "1 credit", "1 token", never "1 credits"."""

import re

from django.core.files.uploadedfile import SimpleUploadedFile

from billing.selectors import balance_get
from billing.services import credits_debit
from core.tenancy import account_context
from documents.kinds import FORMATS_IN_WORDS, KINDS, UPLOAD_ACCEPT
from documents.models import Document


def test_the_picker_accepts_images_from_the_registry(client_a):
    page = client_a.get("/documents/").content.decode()
    accept = re.search(r'id="file-input"[^>]*accept="([^"]+)"', page).group(1)
    assert accept == UPLOAD_ACCEPT
    for kind in KINDS:
        if kind.is_image:
            assert set(kind.extensions) <= set(accept.split(",")), kind.name


def test_getting_started_lists_every_kind_from_the_registry(client_a):
    assert FORMATS_IN_WORDS.startswith("PDF, DOCX")
    assert "XLSX" in FORMATS_IN_WORDS and "PPTX" in FORMATS_IN_WORDS
    assert "images (PNG, JPEG, WebP, TIFF)" in FORMATS_IN_WORDS
    home = client_a.get("/").content.decode()
    assert f'<span id="start-formats">{FORMATS_IN_WORDS}</span>' in home
    empty = client_a.get("/documents/").content.decode()
    assert f'<span id="empty-formats">{FORMATS_IN_WORDS}</span>' in empty


def test_the_knowledge_base_says_why_tokens_and_credits_differ(
    client_a, account_a, settings, fake_llm, run_jobs, django_capture_on_commit_callbacks
):
    from documents.embedding import active_embedding_model

    with account_context(account_a):
        model = active_embedding_model(account_id=account_a.pk).model
    settings.CREDITS_PER_1K_TOKENS = {"chat": 1000, "embedding": 1000, f"embedding:{model}": 3000}
    with django_capture_on_commit_callbacks(execute=True):
        client_a.post(
            "/documents/upload/",
            {"file": SimpleUploadedFile("a.txt", b"Our office opens at nine.", content_type="text/plain")},
        )
    run_jobs()
    page = client_a.get("/documents/").content.decode()
    note = f"at 3,000 credits per 1,000 tokens for {model}"
    assert 'data-charge-note="Tokens embedded: what the embedding model was sent and counted' in page
    assert page.count(note) >= 3  # the table's data, the column head, the row


def test_counts_of_one_are_singular(client_a, account_a, fake_llm, run_jobs, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        client_a.post("/documents/upload/", {"file": SimpleUploadedFile("a.txt", b"Nine.", content_type="text/plain")})
    run_jobs()
    with account_context(account_a):
        document = Document.objects.for_account(account_a).get()
        credits_debit(account=account_a, tokens=balance_get(account=account_a) - 1, key="drain", kind="chat")
    assert document.chunk_count == 1
    page = client_a.get(f"/documents/{document.pk}/").content.decode()
    assert "1 chunks" not in page and "1 credits" not in page
    assert "<span data-balance>1</span> credit</a>" in page
    assert re.search(r"<span>\d+ tokens?</span></header>", page)
    kb = client_a.get("/documents/").content.decode()
    assert (
        f'<span data-field="credits_charged">{document.credits_charged}</span> <span data-field="credit_word">credit{"" if document.credits_charged == 1 else "s"}</span>'
        in kb
    )
