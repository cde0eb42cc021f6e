"""PDF: one section per page with text, heading paths from the outline (bookmarks).

pypdf is imported inside parse_pdf, so importing this module stays cheap.
"""
from __future__ import annotations

import logging
import re

from documents.errors import IngestionError
from documents.parsing.sections import ParsedDocument, Section, squeeze_blank_lines

logger = logging.getLogger("groundwork.documents.parsing")

MSG_ENCRYPTED = "This PDF is password-protected. Remove the password and upload it again."
MSG_PDF_NO_TEXT = "This PDF has no extractable text (a scanned PDF needs OCR first)."
MSG_PDF_CORRUPT = ("This PDF is damaged and could not be read. Open it in a PDF viewer, save or print it "
                   "to a new PDF, and upload that.")


_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                            "\ufb05": "st", "\ufb06": "st", "\x00": ""})
_TRAILING_SPACE = re.compile(r"[ \t]+\n")
_JUNK_TITLES = re.compile(r"^(untitled|document\d*|microsoft word - .*|slide \d+|\W*)$", re.IGNORECASE)

# What pypdf raises on malformed input besides its own errors (it parses untrusted
# structure with plain Python code).
_PDF_DAMAGE = (ValueError, KeyError, TypeError, IndexError, AttributeError, AssertionError,
               UnicodeError, OverflowError, ZeroDivisionError, EOFError)


def parse_pdf(path: str, fallback_title: str) -> ParsedDocument:
    """One section per page with text, pages 1-based; heading paths from the outline
    (bookmarks) when there is one. Raises encrypted_pdf, corrupt_file or no_text."""
    import pypdf
    from pypdf.errors import DependencyError, PyPdfError

    damage = (PyPdfError,) + _PDF_DAMAGE
    try:
        reader = pypdf.PdfReader(path)
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            raise IngestionError("encrypted_pdf", MSG_ENCRYPTED)
        page_count = len(reader.pages)
    except (IngestionError, DependencyError):
        raise
    except damage as exc:
        logger.warning("unreadable pdf %s: %r", path, exc)
        raise IngestionError("corrupt_file", MSG_PDF_CORRUPT) from None
    if page_count == 0:
        raise IngestionError("corrupt_file", MSG_PDF_CORRUPT)
    paths = _pdf_heading_paths(reader, page_count, damage)
    sections, failed = [], 0
    for number in range(1, page_count + 1):
        try:
            text = reader.pages[number - 1].extract_text() or ""
        except damage as exc:
            # One bad page should not cost the whole document.
            logger.warning("pdf %s page %s unreadable: %r", path, number, exc)
            failed += 1
            continue
        text = _clean_pdf_text(text)
        if text:
            sections.append(Section(text=text, heading_path=paths[number - 1], page_start=number, page_end=number))
    if failed == page_count:
        raise IngestionError("corrupt_file", MSG_PDF_CORRUPT)
    if not any(any(ch.isalnum() for ch in s.text) for s in sections):
        raise IngestionError("no_text", MSG_PDF_NO_TEXT)
    return ParsedDocument(title=_pdf_title(reader, damage) or fallback_title, sections=sections)


def _clean_pdf_text(text: str) -> str:
    text = text.translate(_LIGATURES).replace("\r\n", "\n").replace("\r", "\n")
    text = _TRAILING_SPACE.sub("\n", text)
    return squeeze_blank_lines(text).strip()


def _pdf_title(reader, damage) -> str:
    try:
        metadata = reader.metadata
        title = (metadata.title if metadata else None) or ""
    except damage:
        return ""
    title = " ".join(str(title).split())
    if title.lower().startswith("microsoft word - "):
        title = title[len("microsoft word - "):]
    return "" if _JUNK_TITLES.match(title) else title


def _pdf_heading_paths(reader, page_count: int, damage) -> list[list[str]]:
    """Per page (0-based), the outline path of the last bookmark starting on or before
    it; [] everywhere when the PDF has no usable outline."""
    entries: list[tuple[int, list[str]]] = []

    def walk(items, parents: list[str], depth: int) -> None:
        previous_path = parents
        for item in items:
            if isinstance(item, list):
                if depth < 6:
                    walk(item, previous_path, depth + 1)
                continue
            title = " ".join(str(getattr(item, "title", "") or "").split())
            page = reader.get_destination_page_number(item)
            previous_path = parents + [title] if title else parents
            if title and page is not None and 0 <= page < page_count:
                entries.append((page, previous_path))

    try:
        walk(reader.outline, [], 1)
    except damage + (RecursionError,) as exc:
        logger.info("ignoring unusable pdf outline: %r", exc)
        return [[] for _ in range(page_count)]
    entries.sort(key=lambda entry: entry[0])  # stable: same-page bookmarks keep their order
    paths: list[list[str]] = []
    current: list[str] = []
    position = 0
    for page in range(page_count):
        while position < len(entries) and entries[position][0] <= page:
            current = entries[position][1]
            position += 1
        paths.append(list(current))
    return paths
