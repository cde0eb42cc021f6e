"""PDF: one section per page with text, heading paths from the outline (bookmarks).

Pages without a text layer (scans) are rendered with pypdfium2 and read by OCR
(documents.parsing.ocr), at most `ocr.limits.max_pages` of them; their sections are marked
text_source="ocr" and the document's notes say which pages were skipped or unreadable.

pypdf and pypdfium2 are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import logging
import re

from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError
from documents.parsing import ocr
from documents.parsing.sections import ParsedDocument, Section, dehyphenate, squeeze_blank_lines

logger = logging.getLogger("groundwork.documents.parsing")

MSG_ENCRYPTED = "This PDF is password-protected. Remove the password and upload it again."
MSG_PDF_NO_TEXT = (
    "This PDF has no extractable text: its pages have no text layer and OCR could not read "
    "any text on them either. Check that the scan is legible (not blank, upside down or "
    "very low resolution), scan it again, and upload it again."
)
# Scans are rendered at this resolution for OCR (a long side above OCR_MAX_SIDE pixels is
# scaled down: a page can declare any size, and rendering must stay within memory).
OCR_DPI = 200
OCR_MAX_SIDE = 2500
MSG_PDF_CORRUPT = (
    "This PDF is damaged and could not be read. Open it in a PDF viewer, save or print it "
    "to a new PDF, and upload that."
)


_LIGATURES = str.maketrans(
    {
        "\ufb00": "ff",
        "\ufb01": "fi",
        "\ufb02": "fl",
        "\ufb03": "ffi",
        "\ufb04": "ffl",
        "\ufb05": "st",
        "\ufb06": "st",
        "\x00": "",
    }
)
_TRAILING_SPACE = re.compile(r"[ \t]+\n")
_JUNK_TITLES = re.compile(r"^(untitled|document\d*|microsoft word - .*|slide \d+|\W*)$", re.IGNORECASE)

# What pypdf raises on malformed input besides its own errors (it parses untrusted
# structure with plain Python code).
_PDF_DAMAGE = (
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    AttributeError,
    AssertionError,
    UnicodeError,
    OverflowError,
    ZeroDivisionError,
    EOFError,
)


def parse_pdf(path: str, fallback_title: str) -> ParsedDocument:
    """One section per page with text, pages 1-based; heading paths from the outline
    (bookmarks) when there is one. Raises encrypted_pdf, corrupt_file or no_text."""
    import pypdf
    from pypdf.errors import DependencyError, PyPdfError

    damage = (PyPdfError,) + _PDF_DAMAGE
    try:
        reader = pypdf.PdfReader(path)
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            raise IngestionError(DocumentErrorCode.ENCRYPTED_PDF, MSG_ENCRYPTED)
        page_count = len(reader.pages)
    except (IngestionError, DependencyError):
        raise
    except damage as exc:
        logger.warning("unreadable pdf %s: %r", path, exc)
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_PDF_CORRUPT) from None
    if page_count == 0:
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_PDF_CORRUPT)
    paths = _pdf_heading_paths(reader, page_count, damage)
    sections, failed, no_text = [], 0, []
    for number in range(1, page_count + 1):
        try:
            text = reader.pages[number - 1].extract_text() or ""
        except damage as exc:
            # One bad page should not cost the whole document.
            logger.warning("pdf %s page %s unreadable: %r", path, number, exc)
            failed += 1
            continue
        text = _clean_pdf_text(text)
        if _has_words(text):
            sections.append(Section(text=text, heading_path=paths[number - 1], page_start=number, page_end=number))
        else:
            no_text.append(number)
    if failed == page_count:
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_PDF_CORRUPT)
    notes: list[str] = []
    if no_text:
        scanned = _ocr_pages(path, no_text, paths, notes)
        sections = sorted(sections + scanned, key=lambda section: section.page_start)
    if not any(_has_words(s.text) for s in sections):
        raise IngestionError(DocumentErrorCode.NO_TEXT, MSG_PDF_NO_TEXT)
    return ParsedDocument(title=_pdf_title(reader, damage) or fallback_title, sections=sections, notes=notes)


def _has_words(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _ocr_pages(path: str, numbers: list[int], paths: list[list[str]], notes: list[str]) -> list[Section]:
    """OCR the pages `numbers` (1-based, no text layer), at most ocr.limits.max_pages of
    them; what was skipped or unreadable goes into `notes`."""
    import pypdfium2

    todo, skipped = numbers[: ocr.limits.max_pages], numbers[ocr.limits.max_pages :]
    sections, unreadable = [], []
    try:
        pdf = pypdfium2.PdfDocument(path)
    except pypdfium2.PdfiumError as exc:
        logger.warning("pdfium cannot open %s for OCR: %r", path, exc)
        unreadable, todo = list(todo), []
        pdf = None
    try:
        for number in todo:
            text = _ocr_page(pdf, number)
            if _has_words(text):
                sections.append(
                    Section(
                        text=text, heading_path=paths[number - 1], page_start=number, page_end=number, text_source="ocr"
                    )
                )
            else:
                unreadable.append(number)
    finally:
        if pdf is not None:
            pdf.close()
    if skipped:
        notes.append(
            f"OCR reads at most {ocr.limits.max_pages} scanned pages a document; {_page_list(skipped)} not read."
        )
    if unreadable:
        notes.append(f"No text could be read on {_page_list(unreadable)}, not even by OCR.")
    return sections


def _ocr_page(pdf, number: int) -> str:
    import pypdfium2

    try:
        page = pdf[number - 1]
        try:
            width, height = page.get_size()
            scale = min(OCR_DPI / 72, OCR_MAX_SIDE / max(width, height, 1))
            bitmap = page.render(scale=scale)
            image = bitmap.to_pil()
        finally:
            page.close()
    except pypdfium2.PdfiumError as exc:
        logger.warning("pdf page %s could not be rendered for OCR: %r", number, exc)
        return ""
    return _clean_pdf_text(ocr.ocr_image(image))


def _page_list(numbers: list[int]) -> str:
    """ "page 3", "pages 3, 5 and 7", "pages 51–70" (runs collapsed)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    parts = [f"{a}" if a == b else f"{a}–{b}" for a, b in runs]
    word = "page" if len(numbers) == 1 else "pages"
    return f"{word} {parts[0]}" if len(parts) == 1 else f"{word} {', '.join(parts[:-1])} and {parts[-1]}"


def _clean_pdf_text(text: str) -> str:
    text = text.translate(_LIGATURES).replace("\r\n", "\n").replace("\r", "\n")
    text = _TRAILING_SPACE.sub("\n", text)
    return squeeze_blank_lines(dehyphenate(text)).strip()


def _pdf_title(reader, damage) -> str:
    try:
        metadata = reader.metadata
        title = (metadata.title if metadata else None) or ""
    except damage:
        return ""
    title = " ".join(str(title).split())
    if title.lower().startswith("microsoft word - "):
        title = title[len("microsoft word - ") :]
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
