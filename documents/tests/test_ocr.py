"""Images and scanned PDFs: text read by OCR in the parser sandbox,
chunks that remember it (text_source), citations that say so, the image on its document page
for its readers only, and a vision model's description paid in credits.

Every picture is real: pages of a text PDF rendered by pypdfium2 and saved by Pillow
(documents/tests/images.py); the text must be read back from the pixels."""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from PIL import Image
from rest_framework.test import APIClient

from accounts.tests.factories import add_member, make_api_key, make_user
from billing.models import CreditLedgerEntry
from core import tenancy
from core.tenancy import account_context
from documents.chunking import chunk_document
from documents.errors import IngestionError, UploadRejected
from documents.models import Chunk, Document, Status
from documents.parsing import ParsedDocument, Section, parse_in_sandbox
from documents.services import collection_create, document_upload
from documents.tests.files import make_pdf, write
from documents.tests.images import CONTENT_TYPES, EXTENSIONS, image_file, scanned_pdf
from llm.fake_server import IMAGE_TOKENS, fake_embedding
from llm.tokens import count_tokens
from retrieval.search.query import hybrid_search

IMAGE_LINES = ["Invoice number 4471 for zebrafish feed", "Total due: 380 euros"]
SCANNED_PAGES = [
    f"Page {i} of the scanned handbook.\nThe pangolin policy number {1000 + i} applies.\nEvery member reads this page."
    for i in (1, 2, 3)
]


def _words(text: str) -> set[str]:
    return set(text.lower().replace(".", " ").replace(":", " ").split())


def _search(account, query):
    with account_context(account):
        return hybrid_search(account=account, query=query, query_vector=fake_embedding(query), threshold=0.0)


# --- parsing in the sandbox ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["png", "jpeg", "webp", "tiff"])
def test_each_image_type_is_read_by_ocr_in_the_sandbox(tmp_path, kind):
    path = write(tmp_path, "stored" + EXTENSIONS[kind], image_file(IMAGE_LINES, kind))
    parsed = parse_in_sandbox(path, kind, timeout_s=300, filename="invoice" + EXTENSIONS[kind])
    assert [s.text_source for s in parsed.sections] == ["ocr"]
    assert {"invoice", "4471", "zebrafish", "feed", "total", "380", "euros"} <= _words(parsed.sections[0].text)
    assert parsed.title == "invoice"


def test_a_scanned_pdf_is_read_page_by_page_by_ocr(tmp_path):
    path = write(tmp_path, "scan.pdf", scanned_pdf(SCANNED_PAGES))
    parsed = parse_in_sandbox(path, "pdf", timeout_s=300)
    assert [(s.page_start, s.text_source) for s in parsed.sections] == [(1, "ocr"), (2, "ocr"), (3, "ocr")]
    for number, section in enumerate(parsed.sections, start=1):
        assert {"page", str(number), "scanned", "handbook", "pangolin", "policy", str(1000 + number)} <= _words(
            section.text
        )
    assert parsed.notes == []


def test_a_pdf_mixing_text_pages_and_scans_keeps_each_pages_source_and_chunks_never_mix_them(tmp_path):
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for data in (make_pdf(["The text layer page mentions the walrus budget."]), scanned_pdf(SCANNED_PAGES[:1])):
        for page in PdfReader(io.BytesIO(data)).pages:
            writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    parsed = parse_in_sandbox(write(tmp_path, "mixed.pdf", out.getvalue()), "pdf", timeout_s=300)
    assert [(s.page_start, s.text_source) for s in parsed.sections] == [(1, "text"), (2, "ocr")]
    drafts = chunk_document(parsed, size=800, overlap=200, count_tokens=count_tokens)
    assert [(d.page_start, d.page_end, d.text_source) for d in drafts] == [(1, 1, "text"), (2, 2, "ocr")]


def test_ocr_stops_at_the_page_limit_and_the_notes_say_which_pages_were_skipped(tmp_path):
    path = write(tmp_path, "scan.pdf", scanned_pdf(SCANNED_PAGES))
    parsed = parse_in_sandbox(path, "pdf", timeout_s=300, ocr_max_pages=1)
    assert [s.page_start for s in parsed.sections] == [1]
    assert parsed.notes == ["OCR reads at most 1 scanned pages a document; pages 2–3 not read."]


def test_an_image_over_the_pixel_limit_is_refused_before_it_is_decoded(tmp_path):
    out = io.BytesIO()
    Image.new("1", (8000, 6000)).save(out, format="PNG")  # 48 megapixels, a few kB of PNG
    with pytest.raises(IngestionError) as info:
        parse_in_sandbox(write(tmp_path, "huge.png", out.getvalue()), "png", timeout_s=300)
    assert info.value.code == "image_too_large"
    assert "8000 × 6000 pixels (48 megapixels)" in info.value.message and "up to 40 megapixels" in info.value.message


def test_a_damaged_image_is_a_clear_error(tmp_path):
    data = image_file(IMAGE_LINES, "png")
    with pytest.raises(IngestionError) as info:
        parse_in_sandbox(write(tmp_path, "cut.png", data[: len(data) // 2]), "png", timeout_s=300)
    assert info.value.code == "corrupt_file"
    assert info.value.message.startswith("This image is damaged and could not be read.")


def test_the_ocr_models_come_from_the_installed_wheel_not_the_network():
    import os

    import rapidocr_onnxruntime

    models = os.path.join(os.path.dirname(rapidocr_onnxruntime.__file__), "models")
    assert {"ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx"} <= set(os.listdir(models))


def test_parsed_notes_and_sources_survive_the_sandbox_report():
    parsed = ParsedDocument(title="t", sections=[Section(text="x", text_source="ocr")], notes=["n"])
    assert ParsedDocument.from_dict(parsed.to_dict()) == parsed


# --- upload validation ---------------------------------------------------------------------


def _validate(name, data, declared):
    from documents.validation import validate_upload

    stream = io.BytesIO(data)
    return validate_upload(
        name=name,
        declared_type=declared,
        data_head=data[:8192],
        size=len(data),
        max_bytes=25 * 1024 * 1024,
        open_file=lambda: stream,
    )


def test_upload_refuses_a_huge_image_a_fake_image_and_an_image_of_another_format():
    out = io.BytesIO()
    Image.new("1", (8000, 6000)).save(out, format="PNG")
    with pytest.raises(UploadRejected) as info:
        _validate("poster.png", out.getvalue(), "image/png")
    assert (info.value.code, info.value.status) == ("image_too_large", 413)
    assert "48 megapixels" in info.value.message
    with pytest.raises(UploadRejected) as info:
        _validate("fake.png", b"\x89PNG\r\n\x1a\n" + b"not really a png" * 10, "image/png")
    assert (info.value.code, info.value.status) == ("type_mismatch", 415)
    assert "not a readable PNG image" in info.value.message
    with pytest.raises(UploadRejected) as info:  # a TIFF renamed .jpg
        _validate("scan.jpg", image_file(IMAGE_LINES, "tiff"), "image/jpeg")
    assert (info.value.code, info.value.status) == ("type_mismatch", 415)
    assert "a TIFF image" in info.value.message


# --- the pipeline --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["png", "jpeg", "webp", "tiff"])
def test_each_image_type_ingests_and_is_searchable_by_a_word_in_it(account_a, fake_llm, upload_and_ingest, kind):
    document = upload_and_ingest(
        account_a, "invoice" + EXTENSIONS[kind], image_file(IMAGE_LINES, kind), CONTENT_TYPES[kind]
    )
    assert (document.status, document.kind, document.error) == (Status.READY, kind, "")
    with account_context(account_a):
        chunks = list(Chunk.objects.for_account(account_a).filter(document=document))
    assert [c.text_source for c in chunks] == ["ocr"]
    assert "zebrafish" in _words(chunks[0].content)
    assert any(h.document_id == document.pk for h in _search(account_a, "zebrafish"))
    assert not fake_llm.requests_to("/v1/chat/completions")  # no VISION_MODEL: no vision call


@pytest.mark.django_db
def test_a_scanned_pdf_becomes_searchable_and_its_citations_say_ocr(account_a, fake_llm, upload_and_ingest):
    document = upload_and_ingest(account_a, "scan.pdf", scanned_pdf(SCANNED_PAGES), "application/pdf")
    assert (document.status, document.page_count, document.error) == (Status.READY, 3, "")
    with account_context(account_a):
        sources = set(
            Chunk.objects.for_account(account_a).filter(document=document).values_list("text_source", flat=True)
        )
    assert sources == {"ocr"}
    assert any(h.document_id == document.pk for h in _search(account_a, "pangolin policy"))

    fake_llm.answer = "Policy 1002 is the pangolin policy [Document 1]."
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_api_key(account_a)}")
    response = api.post("/api/v1/chat/", {"message": "Which pangolin policy number applies?"}, format="json")
    assert response.status_code == 200, response.content
    citations = response.json()["citations"]
    assert citations and citations[0]["document_id"] == document.pk and citations[0]["ocr"] is True


@pytest.mark.django_db
def test_a_text_pdfs_citations_do_not_say_ocr(account_a, fake_llm, upload_and_ingest):
    upload_and_ingest(account_a, "memo.pdf", make_pdf(["The walrus budget is approved for March."]), "application/pdf")
    fake_llm.answer = "It is approved [Document 1]."
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_api_key(account_a)}")
    citations = api.post("/api/v1/chat/", {"message": "Is the walrus budget approved?"}, format="json").json()[
        "citations"
    ]
    assert citations and "ocr" not in citations[0]


@pytest.mark.django_db
def test_skipped_scanned_pages_are_named_on_the_ready_document(account_a, fake_llm, upload_and_ingest, settings):
    settings.OCR_MAX_PAGES = 2
    document = upload_and_ingest(account_a, "scan.pdf", scanned_pdf(SCANNED_PAGES), "application/pdf")
    assert document.status == Status.READY
    assert (document.error_code, document.error) == (
        "partly_read",
        "OCR reads at most 2 scanned pages a document; page 3 not read.",
    )


@pytest.mark.django_db
def test_a_damaged_image_fails_clearly_and_writes_no_chunks(account_a, fake_llm, upload_and_ingest):
    data = image_file(IMAGE_LINES, "png")
    document = upload_and_ingest(account_a, "cut.png", data[: len(data) // 2], "image/png")
    assert (document.status, document.error_code) == (Status.FAILED, "corrupt_file")
    assert document.error.startswith("This image is damaged and could not be read.")
    with account_context(account_a):
        assert not Chunk.objects.for_account(account_a).filter(document=document).exists()
        assert (
            not CreditLedgerEntry.objects.for_account(account_a)
            .filter(reference__startswith=f"document:{document.pk}:")
            .exists()
        )


@pytest.mark.django_db
def test_an_image_without_text_and_without_a_vision_model_says_so(account_a, fake_llm, upload_and_ingest):
    out = io.BytesIO()
    Image.new("RGB", (400, 300), "white").save(out, format="PNG")
    document = upload_and_ingest(account_a, "blank.png", out.getvalue(), "image/png")
    assert (document.status, document.error_code) == (Status.FAILED, "no_text")
    assert "not even by OCR" in document.error and "VISION_MODEL" in document.error


# --- the vision model ----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_vision_model_describes_the_image_paid_once_by_the_uploader(
    account_a, owner_a, fake_llm, run_jobs, django_capture_on_commit_callbacks, settings
):
    import hashlib

    settings.VISION_MODEL = "fake-vision"
    data = image_file(IMAGE_LINES, "png")
    with account_context(account_a, user=owner_a), django_capture_on_commit_callbacks(execute=True):
        document, _ = document_upload(
            account=account_a, actor=owner_a, upload=SimpleUploadedFile("invoice.png", data, content_type="image/png")
        )
    run_jobs()
    vision_requests = fake_llm.requests_to("/v1/chat/completions")
    assert len(vision_requests) == 1 and vision_requests[0]["model"] == "fake-vision"
    image_part = vision_requests[0]["messages"][0]["content"][1]
    assert image_part["image_url"]["url"].startswith("data:image/png;base64,")
    described = (
        f"Fake image description: a image/png picture of {len(data)} bytes, digest "
        f"{hashlib.sha256(data).hexdigest()[:12]}."
    )
    with account_context(account_a):
        document = Document.objects.for_account(account_a).get(pk=document.pk)
        chunks = {c.text_source: c for c in Chunk.objects.for_account(account_a).filter(document=document)}
        entry = CreditLedgerEntry.objects.for_account(account_a).get(
            idempotency_key=f"vision:{document.pk}:{document.revision}"
        )
        embedding = CreditLedgerEntry.objects.for_account(account_a).get(
            idempotency_key=f"ingest:{document.pk}:{document.revision}"
        )
    assert document.status == Status.READY
    assert set(chunks) == {"ocr", "vision"} and chunks["vision"].content == described
    prompt = count_tokens_fake(vision_requests[0]) + IMAGE_TOKENS
    assert entry.tokens == prompt + len(described.split())  # the provider's usage, 1:1
    assert entry.spent_by_user_id == owner_a.pk and entry.delta == -entry.tokens
    assert document.credits_charged == entry.tokens + embedding.tokens
    assert any(h.document_id == document.pk for h in _search(account_a, "fake image description"))


def count_tokens_fake(body: dict) -> int:
    """The fake server's prompt count of a vision request's text (whitespace tokens)."""
    return sum(len(p.get("text", "").split()) for m in body["messages"] for p in m["content"] if "text" in p)


@pytest.mark.django_db
def test_a_failing_vision_model_fails_the_document_without_charging(account_a, fake_llm, upload_and_ingest, settings):
    settings.VISION_MODEL = "broken-vision"
    fake_llm.fail("broken-vision", 400)
    document = upload_and_ingest(account_a, "invoice.png", image_file(IMAGE_LINES, "png"), "image/png")
    assert document.status == Status.FAILED and "not charged" in document.error
    with account_context(account_a):
        assert (
            not CreditLedgerEntry.objects.for_account(account_a).filter(idempotency_key__startswith="vision:").exists()
        )


# --- the image on its page, for its readers only -------------------------------------------


@pytest.fixture
def image_document(account_a, fake_llm, upload_and_ingest):
    return upload_and_ingest(account_a, "invoice.png", image_file(IMAGE_LINES, "png"), "image/png")


@pytest.mark.django_db
def test_the_document_page_shows_the_image_beside_its_text(client, owner_a, image_document):
    client.force_login(owner_a)
    page = client.get(f"/documents/{image_document.pk}/?chunk=0")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'src="/documents/{image_document.pk}/image/"' in html and 'class="image-beside-text"' in html
    assert "zebrafish" in html and '<span class="text-source">OCR</span>' in html
    image = client.get(f"/documents/{image_document.pk}/image/")
    assert image.status_code == 200 and image["Content-Type"] == "image/png"
    assert b"".join(image.streaming_content) == image_file(IMAGE_LINES, "png")


@pytest.mark.django_db
def test_the_image_is_404_for_another_account(client, account_b, owner_b, image_document):
    client.force_login(owner_b)
    assert client.get(f"/documents/{image_document.pk}/image/").status_code == 404


@pytest.mark.django_db
def test_the_image_is_404_for_a_member_outside_its_restricted_collection(client, account_a, owner_a, image_document):
    member = add_member(account_a, make_user("member@acme.test"))
    insider = add_member(account_a, make_user("insider@acme.test"))
    with account_context(account_a, user=owner_a):
        board = collection_create(
            account=account_a, actor=owner_a, name="Board", restricted=True, user_ids=[insider.pk], api_key_ids=[]
        )
    with tenancy.dangerously_bypass_tenancy(reason="test: file the image under Board"):
        Document.all_accounts.filter(pk=image_document.pk).update(collection=board)
        Chunk.all_accounts.filter(document_id=image_document.pk).update(collection=board)
    client.force_login(member)
    assert client.get(f"/documents/{image_document.pk}/image/").status_code == 404
    client.force_login(insider)
    assert client.get(f"/documents/{image_document.pk}/image/").status_code == 200


@pytest.mark.django_db
def test_a_document_that_is_no_image_has_no_image_view(client, account_a, owner_a, fake_llm, upload_and_ingest):
    document = upload_and_ingest(account_a, "memo.txt", b"The walrus budget is approved.")
    client.force_login(owner_a)
    assert client.get(f"/documents/{document.pk}/image/").status_code == 404


def test_the_chat_page_marks_an_ocr_citation():
    from django.template.loader import render_to_string

    source = {"n": 1, "document_id": 7, "document_name": "scan.pdf", "chunk_index": 2, "pages": [3, 3]}
    assert "(OCR)" in render_to_string("chat/_source_item.html", {"s": {**source, "ocr": True}})
    assert "(OCR)" not in render_to_string("chat/_source_item.html", {"s": source})
    with open("static/js/chat.js", encoding="utf-8") as script:  # the live answer's sources say it too
        assert script.read().count('(s.ocr ? " (OCR)" : "")') == 2


def _png_declaring(width: int, height: int) -> bytes:
    """A tiny PNG whose header declares `width` × `height` (its one IDAT holds a few bytes):
    what a decompression-bomb upload looks like."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def test_upload_refuses_a_png_that_declares_a_huge_picture_as_too_large_not_as_the_wrong_type():
    """Found from outside: 100000 × 100000 answered 415 (Pillow's bomb check raised on open);
    docs/guide/knowledge-base.md promises 413 for a picture too large."""
    with pytest.raises(UploadRejected) as info:
        _validate("bomb.png", _png_declaring(100_000, 100_000), "image/png")
    assert (info.value.code, info.value.status) == ("image_too_large", 413)
    assert "100000 × 100000" in info.value.message


def test_upload_checks_every_frame_of_a_tiff():
    """Found from outside: a two-frame TIFF (10 × 10, then 8000 × 6000) was accepted by its
    first frame and failed later in the worker."""
    out = io.BytesIO()
    Image.new("1", (10, 10)).save(out, format="TIFF", save_all=True, append_images=[Image.new("1", (8000, 6000))])
    with pytest.raises(UploadRejected) as info:
        _validate("scan.tiff", out.getvalue(), "image/tiff")
    assert (info.value.code, info.value.status) == ("image_too_large", 413)
    assert "8000 × 6000" in info.value.message and "page 2" in info.value.message
    small = io.BytesIO()
    Image.new("1", (10, 10)).save(small, format="TIFF", save_all=True, append_images=[Image.new("1", (20, 20))])
    _validate("two-pages.tiff", small.getvalue(), "image/tiff")  # every frame within the limit: accepted
