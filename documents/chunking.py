"""Heading-aware recursive chunking of a ParsedDocument.

Guarantees of `chunk_document`:
- chunks never span two sections, except consecutive PDF pages under the same heading
  path and of the same text source, which are one flow of text (a sentence may run
  across a page break); each chunk keeps its section's text_source (text, ocr, vision);
- each chunk ends at the strongest break available in the second half of its window:
  a blank line (paragraph), else a line break that ends a sentence or starts a list
  item, heading or table row, else a sentence end, else any line break, else a space,
  so a word is never cut (only a single "word" longer than `size`, such as a URL or base64,
  is cut, at `size` characters);
- chunk content is at most `size` characters, with one exception: a Markdown table
  section (CSV) repeats its header row in every chunk, and a header longer than
  size/2 can push such a chunk to header + size/2;
- consecutive chunks of one flow overlap by at most `overlap` characters (at least
  overlap/4 when the text has a break there), starting at the strongest break in that
  window; table chunks overlap by whole rows only;
- page_start/page_end are the pages of the chunk's first and last characters;
- indexes run from 0 without gaps; no chunk is empty; the output depends only on the input.

Runs in linear time: breaks are searched with regular expressions inside windows of
`size` characters, and chunk texts are slices, never built by repeated concatenation.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from documents.parsing import ParsedDocument

# Break patterns, strongest first; a match starts where a chunk may end. A line break
# after a sentence end, or before a list item, heading, quote or table row, is a real
# line; any other line break is soft wrapping (PDF text, hard-wrapped .txt) and ranks
# below a sentence end so that chunks of wrapped prose end at sentences.
_PARAGRAPH = re.compile(r"[ \t]*\n(?:[ \t]*\n)+\s*")
_LINE = re.compile(
    r"(?:(?<=[.!?…:;。！？])|(?<=[.!?…][\"'”’)\]]))[ \t]*\n\s*"
    r"|[ \t]*\n(?=[ \t]*(?:[#>|*+•-]|\d+[.)][ \t]))\s*"
)
_SENTENCE = re.compile(r"(?:(?<=[.!?…])|(?<=[.!?…][\"'”’)\]]))\s+|(?<=[。！？])\s*")
_SOFT_LINE = re.compile(r"[ \t]*\n\s*")
_WORD = re.compile(r"\s+")
_BREAKS = (_PARAGRAPH, _LINE, _SENTENCE, _SOFT_LINE, _WORD)
_NON_SPACE = re.compile(r"\S")
_LOOKAHEAD = 16
_TABLE_HEADER = re.compile(r"\|[^\n]*\|[ \t]*\n\|(?:[ \t]*:?-{3,}:?[ \t]*\|)+[ \t]*(?:\n|$)")


@dataclass
class ChunkDraft:
    index: int
    content: str
    token_count: int
    page_start: int | None
    page_end: int | None
    heading_path: list[str] = field(default_factory=list)
    text_source: str = "text"  # where the text came from: text, ocr or vision (Section.text_source)


@dataclass
class _Flow:
    """Text chunked as one piece: a section, or consecutive same-heading PDF pages.

    page_offsets[i] is where page pages[i] starts in text."""

    text: str
    heading_path: list[str]
    page_offsets: list[int]
    pages: list[int | None]
    page_ends: list[int | None]
    text_source: str = "text"


def chunk_document(
    parsed: ParsedDocument, *, size: int = 800, overlap: int = 200, count_tokens: Callable[[str], int]
) -> list[ChunkDraft]:
    """Split `parsed` into chunks of about `size` characters overlapping by about
    `overlap` characters (see the module docstring for the exact guarantees)."""
    if size < 1:
        raise ValueError("size must be positive")
    if not 0 <= overlap < size:
        raise ValueError("overlap must be at least 0 and smaller than size")
    drafts: list[ChunkDraft] = []
    for flow in _flows(parsed):
        for start, end, header in _chunk_spans(flow.text, size, overlap):
            content = flow.text[start:end] if not header else header + "\n" + flow.text[start:end]
            page_start, _ = _pages_at(flow, start)
            _, page_end = _pages_at(flow, end - 1)
            drafts.append(
                ChunkDraft(
                    index=len(drafts),
                    content=content,
                    token_count=count_tokens(content),
                    page_start=page_start,
                    page_end=page_end,
                    heading_path=list(flow.heading_path),
                    text_source=flow.text_source,
                )
            )
    return drafts


def embedding_text(chunk: ChunkDraft, title: str) -> str:
    """What to embed for a chunk: "Title > Heading > Subheading" on the first line, then
    the content. The stored content stays without it."""
    parts = [title.strip()] if title and title.strip() else []
    for heading in chunk.heading_path:
        if heading and not (parts and parts[-1] == heading):
            parts.append(heading)
    if not parts:
        return chunk.content
    return " > ".join(parts) + "\n\n" + chunk.content


def _flows(parsed: ParsedDocument) -> list[_Flow]:
    """Sections as flows; consecutive paged sections with the same heading path merge,
    joined with a line break (a page break is not a paragraph break)."""
    flows: list[_Flow] = []
    pending: list = []

    def close() -> None:
        if not pending:
            return
        pieces, offsets, starts, ends, position = [], [], [], [], 0
        for section in pending:
            text = section.text.strip()
            if not text:
                continue
            if pieces:
                pieces.append("\n")
                position += 1
            offsets.append(position)
            starts.append(section.page_start)
            ends.append(section.page_end if section.page_end is not None else section.page_start)
            pieces.append(text)
            position += len(text)
        if pieces:
            flows.append(
                _Flow(
                    text="".join(pieces),
                    heading_path=list(pending[0].heading_path),
                    page_offsets=offsets,
                    pages=starts,
                    page_ends=ends,
                    text_source=pending[0].text_source,
                )
            )
        pending.clear()

    for section in parsed.sections:
        paged = section.page_start is not None
        # A chunk never mixes OCR'd text with the file's own (its citation says which it is).
        if pending and not (
            paged
            and pending[-1].page_start is not None
            and pending[-1].heading_path == section.heading_path
            and pending[-1].text_source == section.text_source
        ):
            close()
        pending.append(section)
        if not paged:
            close()
    close()
    return flows


def _pages_at(flow: _Flow, position: int) -> tuple[int | None, int | None]:
    """(first page, last page) of the section holding the character at `position`."""
    i = max(0, bisect.bisect_right(flow.page_offsets, position) - 1)
    return flow.pages[i], flow.page_ends[i]


def _chunk_spans(text: str, size: int, overlap: int):
    """Yield (start, end, header) spans of `text`, header "" or a table header to prepend."""
    header = ""
    body_start = 0
    overlap_breaks = _BREAKS
    match = _TABLE_HEADER.match(text)
    if match:
        header = text[: match.end()].rstrip("\n")
        body_start = match.end()
        if not text[body_start:].strip():
            yield 0, len(header), ""
            return
        if len(text) <= size:
            yield 0, len(text.rstrip()), ""
            return
        size = max(size - len(header) - 1, size // 2)
        overlap = min(overlap, size // 2)
        # An overlap that starts inside a row would begin with half a row: whole rows only.
        overlap_breaks = (_PARAGRAPH, _LINE, _SOFT_LINE)
    first = _NON_SPACE.search(text, body_start)
    if first is None:
        return
    end_of_text = len(text.rstrip())
    start, previous_end = first.start(), first.start()
    while True:
        if end_of_text - start <= size:
            yield start, end_of_text, header
            return
        end, fresh = _chunk_end(text, start, size, floor=previous_end + 1)
        yield start, end, header
        start, previous_end = _next_start(text, start, end, fresh, overlap, overlap_breaks), end


def _chunk_end(text: str, start: int, size: int, *, floor: int) -> tuple[int, int]:
    """(end of this chunk, start of the text after it) for a chunk starting at `start`
    that does not fit in `size`: the strongest break in the second half of the window,
    else the last space anywhere in it, else a hard cut at `size` characters. The end is
    after `floor` (the previous chunk's end), so every chunk adds new text."""
    limit = start + size
    found = None
    second_half = max(start + max(1, size // 2), floor)
    for pattern in _BREAKS:
        found = _last_match(pattern, text, second_half, limit)
        if found is not None:
            break
    if found is None:
        found = _last_match(_WORD, text, max(start + 1, floor), limit)
    if found is not None:
        break_at, fresh = found
        return start + len(text[start:break_at].rstrip()), fresh
    # Only a "word" longer than the whole chunk (a URL, base64) gets here.
    return limit, _skip_space(text, limit)


def _last_match(pattern: re.Pattern, text: str, low: int, limit: int) -> tuple[int, int] | None:
    """(start, next non-space after it) of the last match of `pattern` starting in [low, limit]."""
    last = None
    # Searching a little past the limit lets a break that starts at the limit be found
    # and lets the look-ahead for a list item or table row see the next line.
    for match in pattern.finditer(text, low, min(limit + _LOOKAHEAD, len(text))):
        if match.start() > limit:
            break
        last = match
    if last is None:
        return None
    return last.start(), _skip_space(text, last.start())


def _skip_space(text: str, position: int) -> int:
    match = _NON_SPACE.search(text, position)
    return match.start() if match else len(text)


def _next_start(text: str, start: int, end: int, fresh: int, overlap: int, breaks: tuple) -> int:
    """Where the next chunk starts: the earliest break of the strongest kind found in the
    overlap window [end - overlap, end - overlap/4], for an overlap of 1/4 to all of
    `overlap`; `fresh` (no overlap) when the window has none. Always after `start`."""
    if overlap <= 0:
        return fresh
    low = max(start + 1, end - overlap)
    high = end - overlap // 4
    if low >= high:
        return fresh
    for pattern in breaks:
        match = pattern.search(text, low, min(high + _LOOKAHEAD, end))
        if match is not None and match.start() < high:
            candidate = _skip_space(text, match.start())
            if candidate < end:
                return candidate
    return fresh
