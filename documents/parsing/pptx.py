"""PowerPoint presentations (.pptx): one section per slide, with its title, its text frames
and tables in reading order and its speaker notes; the slide number is the section's page,
so citations say "page N" for slide N as they do for a PDF's pages.

python-pptx is imported inside parse_pptx, so importing this module stays cheap; `import
pptx` there is python-pptx (imports are absolute), never this module. The stored file is
re-checked against the zip-bomb limits first.

No Django here: the sandboxed child imports this module without settings.
"""

from __future__ import annotations

import logging
import re
import zipfile
import zlib

from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError
from documents.parsing.archives import check_office_package
from documents.parsing.sections import ParsedDocument, Section, md_table, squeeze_blank_lines

logger = logging.getLogger("groundwork.documents.parsing")

MSG_PPTX_CORRUPT = (
    "This PowerPoint presentation is damaged and could not be read. Open it in PowerPoint, "
    "save it again as .pptx (or as PDF), and upload that."
)
# Group shapes nest; a file nesting deeper than this is not a real deck.
MAX_GROUP_DEPTH = 20
_NOTES_LABEL = re.compile(r"^(?:speaker\s+)?notes?\s*:\s*", re.I)


def parse_pptx(path: str, fallback_title: str) -> ParsedDocument:
    """A section per slide with text: "# title", then text frames and tables (as Markdown
    tables) top to bottom, left to right, then "Speaker notes:" and the notes. Heading path
    [slide title] (or ["Slide N"]); page_start = page_end = the slide's number."""
    check_office_package(path, "pptx", corrupt_message=MSG_PPTX_CORRUPT)
    import pptx
    from lxml.etree import XMLSyntaxError
    from pptx.exc import PackageNotFoundError

    try:
        presentation = pptx.Presentation(path)
        sections = []
        for number, slide in enumerate(presentation.slides, start=1):
            section = _slide_section(slide, number)
            if section is not None:
                sections.append(section)
        title = (presentation.core_properties.title or "").strip()
    except (
        PackageNotFoundError,
        XMLSyntaxError,
        zipfile.BadZipFile,
        zlib.error,
        KeyError,
        ValueError,
        TypeError,
        AttributeError,
        EOFError,
    ) as exc:
        logger.warning("unreadable pptx %s: %r", path, exc)
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_PPTX_CORRUPT) from None
    return ParsedDocument(title=title or fallback_title, sections=sections)


def _slide_section(slide, number: int) -> Section | None:
    title_shape = slide.shapes.title
    title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
    blocks = [f"# {title}"] if title else []
    skip = {title_shape.shape_id} if title_shape is not None else set()
    body = [block for block in _shape_blocks(slide.shapes, skip, depth=0) if block.strip()]
    notes = _notes(slide)
    if not body and not notes and not title:
        return None
    blocks += body
    if notes:
        blocks.append("Speaker notes: " + notes)
    text = squeeze_blank_lines("\n\n".join(blocks)).strip()
    return Section(text=text, heading_path=[title or f"Slide {number}"], page_start=number, page_end=number)


def _shape_blocks(shapes, skip: set[int], *, depth: int) -> list[str]:
    """Text frames and tables of `shapes` (groups entered), in reading order."""
    from pptx.shapes.group import GroupShape

    if depth > MAX_GROUP_DEPTH:
        return []
    blocks = []
    for shape in sorted(shapes, key=lambda s: (s.top or 0, s.left or 0)):
        if shape.shape_id in skip:
            continue
        if isinstance(shape, GroupShape):
            blocks += _shape_blocks(shape.shapes, skip, depth=depth + 1)
        elif getattr(shape, "has_table", False) and shape.has_table:
            blocks.append(md_table([[cell.text for cell in row.cells] for row in shape.table.rows]))
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            blocks.append(_frame_text(shape.text_frame))
    return blocks


def _frame_text(frame) -> str:
    """Paragraphs one a line; indented paragraphs (bullet levels) as list items."""
    lines = []
    for paragraph in frame.paragraphs:
        text = " ".join(paragraph.text.split())
        if text:
            lines.append(("  " * (paragraph.level - 1) + "- " + text) if paragraph.level else text)
    return "\n".join(lines)


def _notes(slide) -> str:
    if not slide.has_notes_slide:
        return ""
    frame = slide.notes_slide.notes_text_frame
    text = " ".join(frame.text.split()) if frame is not None else ""
    # Notes that open with their own label ("Speaker note: …") would read "Speaker notes:
    # Speaker note: …" under ours.
    return _NOTES_LABEL.sub("", text)
