"""Plain text (.txt): the whole file as one section without headings."""

from __future__ import annotations

from documents.parsing.sections import ParsedDocument, Section, read_text, squeeze_blank_lines


def parse_txt(path: str, fallback_title: str) -> ParsedDocument:
    """The whole text as one section without headings."""
    text = squeeze_blank_lines(read_text(path)).strip("\n")
    return ParsedDocument(title=fallback_title, sections=[Section(text=text)] if text.strip() else [])
