"""Markdown: sections split at ATX and setext headings, fenced code left alone."""

from __future__ import annotations

import re

from documents.parsing.sections import ParsedDocument, SectionBuilder, read_text

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_NOT_SETEXT_TEXT = re.compile(r"^ {0,3}(?:[-*+>|]|\d+[.)]\s|#)")


def parse_markdown(path: str, fallback_title: str) -> ParsedDocument:
    """Sections split at ATX (#) and setext (===/---) headings outside fenced code; the
    title is the first level-1 heading, else the file name."""
    lines = read_text(path).split("\n")
    builder = SectionBuilder()
    title = ""
    fence: str | None = None
    previous_blank = True
    i = 0
    while i < len(lines):
        line = lines[i]
        fence_match = _FENCE.match(line)
        if fence is not None:
            if fence_match and fence_match.group(1)[0] == fence[0] and len(fence_match.group(1)) >= len(fence):
                fence = None
            builder.line(line)
        elif fence_match:
            fence = fence_match.group(1)
            builder.line(line)
        elif (heading := _ATX.match(line)) and (text := (heading.group(2) or "").strip()):
            builder.heading(len(heading.group(1)), text, line.strip())
            title = title or (text if len(heading.group(1)) == 1 else "")
        elif (
            previous_blank
            and line.strip()
            and i + 1 < len(lines)
            and _SETEXT.match(lines[i + 1])
            and not _NOT_SETEXT_TEXT.match(line)
        ):
            level = 1 if lines[i + 1].strip().startswith("=") else 2
            builder.heading(level, line.strip(), f"{'#' * level} {line.strip()}")
            title = title or (line.strip() if level == 1 else "")
            i += 1
        else:
            builder.line(line)
        previous_blank = not line.strip()
        i += 1
    return ParsedDocument(title=title or fallback_title, sections=builder.finish())
