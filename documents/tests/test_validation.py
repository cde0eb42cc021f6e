"""Upload validation: supported types, sizes, declared type vs extension vs magic bytes,
the DOCX zip-bomb guard and display-name sanitising. Files are made here, in memory."""

from __future__ import annotations

import codecs
import io
import zipfile
from pathlib import Path

import docx
import pytest

from documents.errors import UploadRejected
from documents.kinds import SUPPORTED_SUMMARY
from documents.parsing.archives import zip_bomb_problem
from documents.validation import ValidatedUpload, sanitize_filename, validate_upload

FIXTURES = Path(__file__).parent / "fixtures"
MB = 1024 * 1024
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def validate(
    name: str, data: bytes, declared: str | None = None, *, max_bytes: int = 25 * MB, size: int | None = None
) -> ValidatedUpload:
    """Validate `data` the way the upload service does: an 8 KB head and a reopenable file."""
    stream = io.BytesIO(data)
    return validate_upload(
        name=name,
        declared_type=declared,
        data_head=data[:8192],
        size=len(data) if size is None else size,
        max_bytes=max_bytes,
        open_file=lambda: stream,
    )


def rejected(name: str, data: bytes, declared: str | None = None, **kwargs) -> UploadRejected:
    with pytest.raises(UploadRejected) as info:
        validate(name, data, declared, **kwargs)
    return info.value


def docx_bytes(text: str = "Hello") -> bytes:
    document = docx.Document()
    document.add_heading("Title", level=1)
    document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return out.getvalue()


@pytest.fixture(scope="module")
def zip_bomb() -> bytes:
    """A .docx-shaped zip whose word/document.xml inflates to 256 MB of zeros (~260 KB packed)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            block = b"\0" * MB
            for _ in range(256):
                member.write(block)
    return out.getvalue()


PDF = (FIXTURES / "camlidl-manual.pdf").read_bytes()


# --- accepted files -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, data, declared, kind, content_type",
    [
        ("manual.pdf", PDF, "application/pdf", "pdf", "application/pdf"),
        ("manual.PDF", PDF, None, "pdf", "application/pdf"),
        ("notes.txt", b"plain text\n", "text/plain; charset=utf-8", "txt", "text/plain"),
        ("notes.txt", codecs.BOM_UTF8 + "caf\u00e9".encode(), "text/plain", "txt", "text/plain"),
        ("notes.txt", "caf\u00e9 \u00fcber".encode("utf-16"), "application/octet-stream", "txt", "text/plain"),
        ("readme.md", b"# Title\n", "text/markdown", "markdown", "text/markdown"),
        ("readme.markdown", b"# Title\n", "text/x-markdown", "markdown", "text/markdown"),
        ("readme.md", b"# Title\n", "text/plain", "markdown", "text/markdown"),
        ("table.csv", b"a,b\n1,2\n", "text/csv", "csv", "text/csv"),
        ("table.csv", b"a,b\n1,2\n", "application/vnd.ms-excel", "csv", "text/csv"),
        ("table.csv", b"a,b\n1,2\n", "application/csv", "csv", "text/csv"),
        ("page.html", b"<html><body>x</body></html>", "text/html", "html", "text/html"),
        ("page.htm", b"<p>x</p>", "", "html", "text/html"),
    ],
)
def test_accepts_supported_files(name, data, declared, kind, content_type):
    result = validate(name, data, declared)
    assert (result.kind, result.content_type) == (kind, content_type)


@pytest.mark.parametrize("declared", [DOCX_TYPE, "application/zip", "application/octet-stream", None])
def test_accepts_docx_with_its_common_declared_types(declared):
    result = validate("report.docx", docx_bytes(), declared)
    assert result == ValidatedUpload(kind="docx", content_type=DOCX_TYPE, safe_name="report.docx")


def test_docx_check_leaves_the_upload_open_and_rewound():
    data = docx_bytes()
    stream = io.BytesIO(data)
    validate_upload(
        name="a.docx", declared_type=None, data_head=data[:8192], size=len(data), max_bytes=MB, open_file=lambda: stream
    )
    assert not stream.closed
    assert stream.tell() == 0
    assert stream.read() == data


def test_text_that_starts_like_a_weak_signature_is_text():
    assert validate("band.txt", b"MZ is a band I like.\n").kind == "txt"
    assert rejected("setup.txt", b"MZ\x90\x00\x03\x00\x00\x00").code == "type_mismatch"  # NULs


def test_text_head_cut_inside_a_multibyte_character_is_accepted():
    data = ("a" * 8191 + "\u00e9" + "tail").encode()  # the 8 KB head ends mid-"é"
    assert validate("cut.txt", data).kind == "txt"


# --- unsupported types ----------------------------------------------------------------


def test_legacy_doc_is_refused_with_advice_to_save_as_docx():
    error = rejected("Minutes.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 100, "application/msword")
    assert (error.code, error.status) == ("unsupported_type", 415)
    assert error.message == (
        f"Groundwork reads {SUPPORTED_SUMMARY}; .doc is not one of them. Save it as .docx or PDF and upload again."
    )


@pytest.mark.parametrize(
    "name, hint",
    [
        ("photo.gif", "images are not one of them. Save the image as PNG or JPEG"),
        ("setup.exe", "Convert it to one of these formats"),
        ("budget.xls", "Save it as .xlsx"),
        ("archive.tar.gz", ".gz is not one of them"),
    ],
)
def test_other_types_are_refused_naming_the_supported_ones(name, hint):
    error = rejected(name, b"\x89PNG\r\n\x1a\n" + b"\0" * 10)
    assert (error.code, error.status) == ("unsupported_type", 415)
    assert f"Groundwork reads {SUPPORTED_SUMMARY};" in error.message
    assert hint in error.message


def test_a_name_without_extension_is_refused():
    error = rejected("README", b"hello")
    assert error.code == "unsupported_type"
    assert "has no file extension" in error.message


# --- sizes ----------------------------------------------------------------------------


def test_too_large_says_the_limit_in_mb():
    error = rejected("big.txt", b"x" * 100, size=30 * MB, max_bytes=25 * MB)
    assert (error.code, error.status) == ("too_large", 413)
    assert "the limit is 25 MB" in error.message
    assert "30 MB" in error.message


def test_exactly_the_limit_is_accepted():
    assert validate("edge.txt", b"x" * 1000, max_bytes=1000).kind == "txt"


def test_empty_file_is_refused():
    error = rejected("empty.txt", b"")
    assert (error.code, error.status) == ("empty_file", 400)
    assert "empty" in error.message


# --- declared type, extension and magic must agree ------------------------------------


def test_pdf_declared_as_text_plain_is_a_mismatch():
    error = rejected("manual.pdf", PDF, "text/plain")
    assert (error.code, error.status) == ("type_mismatch", 415)
    assert "text/plain" in error.message and "PDF" in error.message


def test_png_renamed_to_txt_is_a_mismatch():
    png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + b"\0" * 64
    error = rejected("notes.txt", png, "text/plain")
    assert (error.code, error.status) == ("type_mismatch", 415)
    assert "PNG image" in error.message


@pytest.mark.parametrize(
    "name, data, label",
    [
        ("data.csv", PDF, "a PDF"),
        ("page.html", b"PK\x03\x04" + b"\0" * 40, "zip archive"),
        ("notes.md", b"\xff\xd8\xff\xe0" + b"\0" * 40, "JPEG"),
        ("notes.txt", b"GIF89a" + b"\0" * 40, "GIF"),
        ("run.txt", b"\x7fELF\x02\x01\x01" + b"\0" * 40, "Linux program"),
    ],
)
def test_binary_magic_under_a_text_name_is_a_mismatch(name, data, label):
    error = rejected(name, data)
    assert error.code == "type_mismatch"
    assert label in error.message


def test_pdf_name_without_pdf_header_is_a_mismatch():
    error = rejected("fake.pdf", b"just some text", "application/pdf")
    assert error.code == "type_mismatch"
    assert "do not match" in error.message


def test_text_with_nul_bytes_is_a_mismatch():
    error = rejected("notes.txt", b"hello\0world")
    assert error.code == "type_mismatch"
    assert "NUL" in error.message


def test_latin1_text_is_refused_with_advice_to_save_as_utf8():
    error = rejected("notes.txt", "caf\u00e9 cr\u00e8me".encode("latin-1"))
    assert error.code == "type_mismatch"
    assert "UTF-8" in error.message


def test_utf16_without_bom_is_refused():
    assert rejected("notes.txt", "hello".encode("utf-16-le")).code == "type_mismatch"


def test_zip_without_word_document_is_not_a_docx():
    error = rejected("photos.docx", zip_bytes({"a.jpg": b"x"}), "application/zip")
    assert error.code == "type_mismatch"
    assert "without a Word document" in error.message


def test_damaged_zip_named_docx_is_a_mismatch():
    data = docx_bytes()
    error = rejected("broken.docx", data[:200])
    assert error.code == "type_mismatch"
    assert "damaged" in error.message


def test_legacy_doc_renamed_docx_is_a_mismatch():
    error = rejected("old.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 100)
    assert error.code == "type_mismatch"
    assert "legacy Microsoft Office" in error.message


# --- zip bombs ------------------------------------------------------------------------


def test_zip_bomb_disguised_as_docx_is_refused(zip_bomb):
    assert len(zip_bomb) < 2 * MB
    error = rejected("invoice.docx", zip_bomb, DOCX_TYPE)
    assert (error.code, error.status) == ("archive_bomb", 400)
    assert "cannot be processed safely" in error.message


def test_docx_with_too_many_members_is_refused():
    members = {"word/document.xml": b"<w:document/>"}
    members.update({f"media/{i}.bin": b"" for i in range(10_001)})
    error = rejected("many.docx", zip_bytes(members))
    assert error.code == "archive_bomb"
    assert "10,002 files" in error.message


def test_docx_whose_parts_add_up_past_200_mb_is_refused():
    # Each member is within the ratio limit (random data does not compress), but the
    # declared total is what counts: patch the central directory sizes.
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("word/document.xml", b"<w:document/>")
        archive.writestr("word/media/big.bin", b"x" * 10)
    archive = zipfile.ZipFile(io.BytesIO(out.getvalue()))
    archive.infolist()[1].file_size = archive.infolist()[1].compress_size = 201 * MB
    assert "expands to 201 MB" in zip_bomb_problem(archive)


# --- display names --------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("report.pdf", "report.pdf"),
        ("C:\\Users\\ann\\Desktop\\report.pdf", "report.pdf"),
        ("../../etc/passwd.txt", "passwd.txt"),
        ("my   quarterly\treport .pdf", "my quarterly report.pdf"),
        ("evil\u202efdp.txt", "evil fdp.txt"),
        ("bell\x07name\x00.md", "bell name.md"),
        ("report.pdf. ", "report.pdf"),
        (".pdf", "document.pdf"),
        ("", "document"),
        ("   ", "document"),
    ],
)
def test_sanitize_filename(raw, expected):
    assert sanitize_filename(raw) == expected


def test_long_names_keep_their_extension_within_200_characters():
    name = sanitize_filename("x" * 500 + ".markdown")
    assert len(name) == 200
    assert name.endswith(".markdown")


def test_validated_safe_name_is_the_sanitised_name():
    assert validate("/tmp/upload/My  Notes.TXT", b"hi").safe_name == "My Notes.TXT"
