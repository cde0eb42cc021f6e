"""The kind registry is the one source of supported kinds: every registered kind is read
by a parser (in process and in the sandbox) and accepted by upload validation under each of
its extensions and declared MIME types."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from documents.kinds import KIND_BY_EXTENSION, KINDS, SUPPORTED_SUMMARY, DocumentKind
from documents.parsing import PARSERS, parse_file, parse_in_sandbox
from documents.tests.files import make_docx, make_pdf, write
from documents.tests.images import image_file
from documents.tests.office_files import make_pptx, make_xlsx
from documents.validation import validate_upload

SAMPLES = {
    "pdf": lambda tmp_path: make_pdf(["Registry sample text."]),
    "docx": lambda tmp_path: Path(make_docx(tmp_path)).read_bytes(),
    "txt": lambda tmp_path: b"Registry sample text.\n",
    "markdown": lambda tmp_path: b"# Registry\n\nSample text.\n",
    "csv": lambda tmp_path: b"name,value\nregistry,1\n",
    "html": lambda tmp_path: b"<h1>Registry</h1><p>Sample text.</p>",
    "xlsx": lambda tmp_path: make_xlsx(),
    "pptx": lambda tmp_path: make_pptx(slides=1),
}

# Images: a page of a real text PDF rendered and saved in each format (read back by OCR).
SAMPLES.update(
    {
        kind: (lambda tmp_path, kind=kind: image_file(["Registry sample text."], kind))
        for kind in ("png", "jpeg", "webp", "tiff")
    }
)


def test_every_registered_kind_has_a_sample_here():
    assert set(SAMPLES) == {kind.name for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_every_kind_has_a_parser_and_is_accepted_by_validation(kind: DocumentKind, tmp_path):
    data = SAMPLES[kind.name](tmp_path)
    assert callable(PARSERS[kind.name])
    for extension in kind.extensions:
        assert KIND_BY_EXTENSION[extension] is kind
        for declared in sorted(kind.declared_types) + [None]:
            stream = io.BytesIO(data)
            result = validate_upload(
                name=f"sample{extension}",
                declared_type=declared,
                data_head=data[:8192],
                size=len(data),
                max_bytes=len(data),
                open_file=lambda stream=stream: stream,
            )
            assert (result.kind, result.content_type) == (kind.name, kind.content_type)
    path = write(tmp_path, f"stored{kind.extensions[0]}", data)
    parsed = parse_file(path, kind.name, filename=f"sample{kind.extensions[0]}")
    assert parsed.sections
    assert parse_in_sandbox(path, kind.name, filename=f"sample{kind.extensions[0]}") == parsed


def test_the_supported_summary_names_every_kind():
    for kind in KINDS:
        assert kind.short_label in SUPPORTED_SUMMARY


def test_which_kinds_may_run_ocr_is_the_registrys_word(settings):
    """OCR (and the sandbox's larger memory and time limits that come with it) is decided by
    DocumentKind.ocr alone: PDF and every image kind, nothing else."""
    from documents import images
    from documents.parsing import ocr

    assert ocr.OCR_KINDS == {kind.name for kind in KINDS if kind.ocr} == {"pdf", "png", "jpeg", "webp", "tiff"}
    settings.PARSE_MEMORY_MB, settings.OCR_MEMORY_MB = 1024, 3072
    settings.PARSE_TIMEOUT_SECONDS, settings.OCR_TIMEOUT_SECONDS = 60, 300
    for kind in KINDS:
        assert kind.ocr or not kind.is_image, kind.name
        assert images.parse_memory_mb(kind.name) == (3072 if kind.ocr else 1024), kind.name
        assert images.parse_timeout_s(kind.name) == (300 if kind.ocr else 60), kind.name
