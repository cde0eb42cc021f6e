"""OCR throughput and its share of ingestion: a 20-page scanned PDF (the pages of a
generated text PDF rendered at 150 dpi and saved by Pillow as a picture-only PDF, as a
scanner makes them), ingested through the whole pipeline (parse in the sandbox with OCR,
chunk, embed with a zero-cost fake embedding server, publish), and the same parse alone.

Reports OCR pages/s (pages / parse time of the scanned PDF in the sandbox), the ingestion of
the scan and of the text PDF it was made from, and OCR's share of the scan's ingestion
(1 - text ingestion / scan ingestion: what the same text costs without OCR is not OCR).
"""

from __future__ import annotations

import os
import tempfile
import time

from django.conf import settings

PAGES = 20


def _pages() -> list[str]:
    from documents.tests.files import prose_page

    return [prose_page(n, sentences=8) for n in range(1, PAGES + 1)]


def run() -> dict:
    from django.core.files.uploadedfile import SimpleUploadedFile

    from accounts.tests.factories import make_account
    from core.tenancy import account_context
    from documents.ingestion import ingest
    from documents.models import Chunk, Document
    from documents.parsing import parse_in_sandbox
    from documents.services import document_upload
    from documents.tests.files import make_pdf
    from documents.tests.images import scanned_pdf
    from llm.fake_server import FakeOpenAIServer

    text_pdf = make_pdf(_pages())
    scan = scanned_pdf(_pages()) + f"\n% {time.time()}\n".encode()
    with tempfile.TemporaryDirectory() as folder:
        scan_path, text_path = os.path.join(folder, "scan.pdf"), os.path.join(folder, "text.pdf")
        with open(scan_path, "wb") as f:
            f.write(scan)
        with open(text_path, "wb") as f:
            f.write(text_pdf)
        started = time.perf_counter()
        parsed = parse_in_sandbox(
            scan_path,
            "pdf",
            timeout_s=settings.OCR_TIMEOUT_SECONDS,
            memory_mb=settings.OCR_MEMORY_MB,
            ocr_max_pages=settings.OCR_MAX_PAGES,
        )
        parse_s = time.perf_counter() - started
        started = time.perf_counter()
        parse_in_sandbox(text_path, "pdf", timeout_s=settings.PARSE_TIMEOUT_SECONDS)
        text_parse_s = time.perf_counter() - started

    ocr_pages = sum(1 for s in parsed.sections if s.text_source == "ocr")
    with FakeOpenAIServer() as server:
        settings.LLM_BASE_URL, settings.LLM_BUNDLED = server.base_url, False
        stamp = time.time()
        account = make_account(name=f"ocr-bench-{stamp}", owner_email=f"ocr-bench-{stamp}@bench.test")
        with account_context(account):
            document, _ = document_upload(
                account=account, actor=None, upload=SimpleUploadedFile("scan.pdf", scan, content_type="application/pdf")
            )
            text_document, _ = document_upload(
                account=account,
                actor=None,
                upload=SimpleUploadedFile(
                    "text.pdf", text_pdf + f"\n% {time.time()}\n".encode(), content_type="application/pdf"
                ),
            )
        started = time.perf_counter()
        ingest(account_id=account.pk, document_id=document.pk, revision=document.revision)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        ingest(account_id=account.pk, document_id=text_document.pk, revision=text_document.revision)
        text_ingest_s = time.perf_counter() - started
        with account_context(account):
            document = Document.objects.for_account(account).get(pk=document.pk)
            chunks = Chunk.objects.for_account(account).filter(document=document, text_source="ocr").count()
    return {
        "settings": {
            "pages": PAGES,
            "render_dpi_of_the_scan": 150,
            "ocr_render_dpi": 200,
            "OCR_MAX_PAGES": settings.OCR_MAX_PAGES,
            "OCR_MEMORY_MB": settings.OCR_MEMORY_MB,
            "OCR_TIMEOUT_SECONDS": settings.OCR_TIMEOUT_SECONDS,
            "embeddings": "fake server (zero cost)",
        },
        "scan_bytes": len(scan),
        "ocr_pages": ocr_pages,
        "parse_with_ocr_s": round(parse_s, 2),
        "ocr_pages_per_s": round(ocr_pages / parse_s, 2) if parse_s else None,
        "text_pdf_parse_s": round(text_parse_s, 2),
        "ingestion_s": round(ingest_s, 2),
        "text_pdf_ingestion_s": round(text_ingest_s, 2),
        # OCR's share: the part of the scan's ingestion that the same text as a text PDF does not need.
        "ocr_share_of_ingestion": round(1 - text_ingest_s / ingest_s, 3) if ingest_s else None,
        "status": document.status,
        "ocr_chunks": chunks,
        "error": document.error,
    }
