"""Word documents (.docx): paragraphs and tables in body order, headings from styles or
outline levels, after re-checking the archive against the zip-bomb limits.

python-docx is imported inside parse_docx, so importing this module stays cheap; `import docx`
there is python-docx (imports are absolute), never this module.
"""

from __future__ import annotations

import logging
import re
import zipfile

from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError
from documents.parsing.archives import archive_bomb_message, zip_bomb_problem
from documents.parsing.sections import ParsedDocument, SectionBuilder, md_table

logger = logging.getLogger("groundwork.documents.parsing")

MSG_DOCX_CORRUPT = (
    "This Word document is damaged and could not be read. Open it in Word, save it again "
    "as .docx (or as PDF), and upload that."
)

_HEADING_STYLE = re.compile(r"^heading\s*([1-6])$", re.IGNORECASE)


def parse_docx(path: str, fallback_title: str) -> ParsedDocument:
    """Paragraphs and tables in body order; Heading 1-6 (or outline-level) paragraphs
    become Markdown headings and the heading path; tables become Markdown tables."""
    _check_archive(path)
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from lxml.etree import XMLSyntaxError

    try:
        document = docx.Document(path)
        builder = SectionBuilder()
        title = ""
        for item in document.iter_inner_content():
            if isinstance(item, Table):
                builder.block(md_table(_docx_table_rows(item)))
                continue
            text = item.text.strip()
            if not text:
                continue
            style_name = _style_name(item)
            if style_name.lower() == "title" and not title:
                title = " ".join(text.split())
            level = _docx_heading_level(item, style_name)
            if level:
                builder.heading(level, " ".join(text.split()))
            else:
                prefix = _docx_list_prefix(item, style_name)
                builder.block(prefix + text, tight=bool(prefix))
        core_title = (document.core_properties.title or "").strip()
    except (PackageNotFoundError, XMLSyntaxError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        logger.warning("unreadable docx %s: %s", path, exc)
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_DOCX_CORRUPT) from None
    return ParsedDocument(title=core_title or title or fallback_title, sections=builder.finish())


def _check_archive(path: str) -> None:
    """Re-check the zip-bomb limits: validation saw the upload, this is the stored file."""
    try:
        with zipfile.ZipFile(path) as archive:
            problem = zip_bomb_problem(archive)
            has_document = "word/document.xml" in archive.namelist()
    except zipfile.BadZipFile:
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_DOCX_CORRUPT) from None
    if problem:
        raise IngestionError(DocumentErrorCode.ARCHIVE_BOMB, archive_bomb_message("This file", problem))
    if not has_document:
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_DOCX_CORRUPT)


def _style_name(paragraph) -> str:
    try:
        style = paragraph.style
    except (KeyError, ValueError):
        return ""
    return (style.name or "") if style is not None else ""


def _docx_heading_level(paragraph, style_name: str) -> int:
    """1-6 for a heading paragraph, else 0: by the built-in style name, or by the outline
    level set on the paragraph or its style chain (which also catches localised or custom
    heading styles)."""
    match = _HEADING_STYLE.match(style_name.strip())
    if match:
        return int(match.group(1))
    level = _outline_level(paragraph._p.pPr)
    style = getattr(paragraph, "style", None)
    depth = 0
    while level is None and style is not None and depth < 10:
        level = _outline_level(style.element.pPr)
        style = style.base_style
        depth += 1
    return level + 1 if level is not None and 0 <= level <= 5 else 0


def _outline_level(ppr) -> int | None:
    if ppr is None or ppr.outlineLvl is None:
        return None
    try:
        return int(ppr.outlineLvl.val)
    except (TypeError, ValueError):
        return None


def _docx_list_prefix(paragraph, style_name: str) -> str:
    lowered = style_name.lower()
    if lowered.startswith("list number"):
        return "1. "
    if lowered.startswith("list") or (paragraph._p.pPr is not None and paragraph._p.pPr.numPr is not None):
        return "- "
    return ""


def _docx_table_rows(table) -> list[list[str]]:
    """Cell texts per row; a merged cell (repeated by python-docx) counts once."""
    rows = []
    for row in table.rows:
        cells, seen = [], set()
        for cell in row.cells:
            if id(cell._tc) in seen:
                continue
            seen.add(id(cell._tc))
            cells.append(cell.text)
        rows.append(cells)
    return rows
