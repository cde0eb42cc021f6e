"""Every supported type through the real pipeline (upload → queue → sandboxed parse →
chunks → embeddings → ready), and every bad file ending as a clear 4xx or a failed
document with its reason, after which the worker still ingests a good file."""

import csv
import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from billing.models import CreditLedgerEntry
from billing.selectors import balance_get
from billing.services import credits_grant
from core.tenancy import account_context
from documents.models import Chunk, Document
from documents.services import document_upload
from documents.tests.files import DEBIAN_PDF, docx_bytes, make_pdf, prose_page, rewrite_pdf

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


@pytest.fixture
def ingest(account_a, fake_llm, upload_and_ingest):
    """Upload through the service as the API does, run the queue, return the document."""
    return lambda name, data, content_type: upload_and_ingest(account_a, name, data, content_type)


def _chunks(account, document):
    with account_context(account):
        return list(Chunk.objects.for_account(account).filter(document=document).order_by("chunk_index"))


def test_real_multipage_pdf_keeps_page_numbers(ingest, account_a):
    with account_context(account_a):
        credits_grant(account=account_a, amount=50_000, reason="a 26-page manual")
    document = ingest("camlidl.pdf", DEBIAN_PDF.read_bytes(), PDF)
    assert document.status == "ready", document.error
    assert document.page_count == 26 and document.kind == "pdf"
    chunks = _chunks(account_a, document)
    assert len(chunks) == document.chunk_count > 20
    assert chunks[0].page_start == 1 and chunks[-1].page_end == 26
    assert all(c.page_start <= c.page_end for c in chunks)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert chunks[0].prev_chunk_id is None and chunks[0].next_chunk_id == chunks[1].pk
    assert chunks[1].prev_chunk_id == chunks[0].pk and chunks[-1].next_chunk_id is None


def test_generated_pdf(ingest, account_a):
    document = ingest("three.pdf", make_pdf([prose_page(n) for n in range(1, 4)], title="Three Pages"), PDF)
    assert document.status == "ready" and document.title == "Three Pages" and document.page_count == 3


def test_docx_with_headings_and_tables(ingest, account_a, tmp_path):
    document = ingest("report.docx", docx_bytes(tmp_path), DOCX)
    assert document.status == "ready", document.error
    text = "\n".join(c.content for c in _chunks(account_a, document))
    assert "# Revenue" in text and "| North | 10 | 12 |" in text
    assert any(c.heading_path[:1] == ["Revenue"] for c in _chunks(account_a, document))


def test_csv_every_chunk_keeps_the_header(ingest, account_a):
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["employee", "team", "holiday_days"])
    for i in range(300):
        writer.writerow([f"person {i}", f"team {i % 7}", 20 + i % 9])
    document = ingest("people.csv", out.getvalue().encode(), "text/csv")
    chunks = _chunks(account_a, document)
    assert document.status == "ready" and len(chunks) > 3
    assert all("employee" in c.content.splitlines()[0] for c in chunks)


def test_html_drops_scripts_and_styles(ingest, account_a):
    html = (
        b"<html><head><title>Policy</title><style>p{color:red}</style><script>alert('x')</script></head>"
        b"<body><h1>Expenses</h1><p>Claims need receipts.</p></body></html>"
    )
    document = ingest("policy.html", html, "text/html")
    text = " ".join(c.content for c in _chunks(account_a, document))
    assert document.status == "ready" and document.title == "Policy"
    assert "Claims need receipts." in text and "alert" not in text and "color:red" not in text


@pytest.mark.parametrize(
    "name, data",
    [
        ("notes.txt", b"Plain notes.\n\nSecond paragraph."),
        ("bom.txt", "\ufeffWith a byte order mark.".encode("utf-8")),
        ("utf16.txt", "Sixteen-bit text, naïve café.".encode("utf-16")),
        ("guide.md", b"# Guide\n\n## Setup\n\nRun make run."),
    ],
)
def test_text_and_markdown(ingest, account_a, name, data):
    document = ingest(name, data, "text/markdown" if name.endswith(".md") else "text/plain")
    assert document.status == "ready", document.error
    assert _chunks(account_a, document)


def _assert_failed_then_good_file_works(ingest, account_a, document, code, words):
    assert document.status == "failed" and document.error_code == code
    assert all(w in document.error for w in words), document.error
    with account_context(account_a):
        assert not Chunk.objects.for_account(account_a).filter(document=document).exists()
        assert not CreditLedgerEntry.objects.for_account(account_a).filter(kind="embedding").exists()
    good = ingest("after.txt", b"The worker is still fine after a bad file.", "text/plain")
    assert good.status == "ready"


def test_encrypted_pdf_fails_with_its_reason(ingest, account_a):
    data = rewrite_pdf(make_pdf([prose_page(1)]), lambda w: w.encrypt(user_password="secret", owner_password="o"))
    document = ingest("locked.pdf", data, PDF)
    _assert_failed_then_good_file_works(ingest, account_a, document, "encrypted_pdf", ["password-protected"])


def test_corrupt_pdf_fails_with_its_reason(ingest, account_a):
    data = make_pdf([prose_page(1), prose_page(2)])
    document = ingest("broken.pdf", data[: len(data) // 3], PDF)
    assert document.error_code in ("corrupt_file", "no_text")
    _assert_failed_then_good_file_works(ingest, account_a, document, document.error_code, ["PDF"])


def test_scanned_pdf_without_text_asks_for_ocr(ingest, account_a):
    document = ingest("scan.pdf", make_pdf(["", ""]), PDF)
    _assert_failed_then_good_file_works(ingest, account_a, document, "no_text", ["OCR"])


def test_huge_text_hits_the_parser_limit_and_fails_cleanly(ingest, account_a, settings):
    settings.PARSE_MEMORY_MB = 120  # small limits keep the test fast; the defaults are larger
    settings.PARSE_TIMEOUT_SECONDS = 5
    data = ("A line of text that repeats. " * 40 + "\n") * 60000  # ~70 MB
    settings.MAX_UPLOAD_BYTES = len(data) + 1
    document = ingest("huge.txt", data.encode(), "text/plain")
    assert document.error_code in ("parse_failed_resources", "parse_timeout")
    _assert_failed_then_good_file_works(
        ingest,
        account_a,
        document,
        document.error_code,
        ["took", "large"] if document.error_code == "parse_timeout" else ["large"],
    )


def test_a_parse_that_hangs_is_stopped_and_the_worker_goes_on(
    ingest, account_a, run_jobs, settings, django_capture_on_commit_callbacks
):
    """A parser that blocks for good (the stored file replaced by a FIFO nobody writes to:
    opening it waits forever, using no CPU, so only the wall clock can stop it): the sandbox
    is killed at PARSE_TIMEOUT_SECONDS, the document fails with its reason, nothing is
    charged, no process is left, and the next document is ingested."""
    import os
    import time

    import psutil
    from django.core.files.storage import default_storage

    settings.PARSE_TIMEOUT_SECONDS = 3
    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        document, _ = document_upload(
            account=account_a,
            actor=None,
            upload=SimpleUploadedFile("stuck.txt", b"Words that will never be read.", content_type="text/plain"),
        )
    path = default_storage.path(document.file.name)
    os.remove(path)
    os.mkfifo(path)
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    started = time.monotonic()
    run_jobs()
    assert time.monotonic() - started < 30
    with account_context(account_a):
        stuck = Document.objects.for_account(account_a).get(pk=document.pk)
    assert stuck.status == "failed" and stuck.error_code == "parse_timeout"
    assert stuck.error.startswith("Reading this file took longer than 3 s")
    left = {p.pid for p in psutil.Process().children(recursive=True)} - children_before
    assert not left, "the hung parser was left running"
    _assert_failed_then_good_file_works(ingest, account_a, stuck, "parse_timeout", ["took longer"])


def test_zip_bomb_is_refused_at_upload(account_a, tmp_path):
    from documents.errors import UploadRejected

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"\0" * (300 * 1024 * 1024))
    with account_context(account_a), pytest.raises(UploadRejected) as exc:
        document_upload(
            account=account_a, actor=None, upload=SimpleUploadedFile("bomb.docx", buffer.getvalue(), content_type=DOCX)
        )
    assert exc.value.code == "archive_bomb" and exc.value.status == 400
    with account_context(account_a):
        assert not Document.objects.for_account(account_a).exists()


def test_not_enough_credits_for_the_embeddings_fails_without_charging(ingest, account_a, settings):
    from billing.services import credits_debit

    with account_context(account_a):
        credits_debit(account=account_a, tokens=balance_get(account=account_a) - 150, key="spend", kind="chat")
    document = ingest("long.txt", ("Many words in a long document. " * 400).encode(), "text/plain")
    assert document.status == "failed" and document.error_code == "insufficient_credits"
    assert document.error.endswith("An owner can add credits.")
    with account_context(account_a):
        assert balance_get(account=account_a) == 150
        credits_grant(account=account_a, amount=5000, reason="top up")


def test_a_retried_job_charges_once_and_duplicates_nothing(ingest, account_a, run_jobs):
    from documents.jobs import ingest_document

    document = ingest("once.txt", ("Sentence for the retry test. " * 200).encode(), "text/plain")
    chunks = len(_chunks(account_a, document))
    # The same job again (a retry after a lost acknowledgement) finds the revision done.
    ingest_document(document_id=document.pk, revision=document.revision, account_id=account_a.pk)
    with account_context(account_a):
        assert CreditLedgerEntry.objects.for_account(account_a).filter(kind="embedding").count() == 1
    assert len(_chunks(account_a, document)) == chunks


def test_embedding_dimension_mismatch_fails_with_a_reason(ingest, account_a, settings):
    settings.EMBEDDING_DIMENSIONS = 768
    document = ingest("dims.txt", b"Some text to embed.", "text/plain")
    assert document.status == "failed" and document.error_code == "embedding_dimension"
    assert "768" in document.error and "384" in document.error
