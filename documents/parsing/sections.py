"""What every parser produces (Section, ParsedDocument) and the helpers they share: the
text-encoding rule (also used by upload validation), the section builder and Markdown tables.

No Django here: the sandboxed child imports this module without settings.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import asdict, dataclass, field

from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError

MSG_BAD_ENCODING = "This file is not valid UTF-8 text. Open it in a text editor, save it as UTF-8, and upload it again."
MSG_NUL_BYTES = (
    "This file contains binary data (NUL bytes), so it is not plain text. Save it as UTF-8 text and upload it again."
)


@dataclass
class Section:
    """A run of text under one heading path; pages are 1-based and inclusive (None: no pages)."""

    text: str
    heading_path: list[str] = field(default_factory=list)
    page_start: int | None = None
    page_end: int | None = None
    # Where the text came from: "text" (the file's own), "ocr" (read from an image or a
    # scanned page) or "vision" (a vision model's description of an image).
    text_source: str = "text"


@dataclass
class ParsedDocument:
    """What a parser found: a title ("" when none was found) and sections in reading order;
    `notes` are what a person should know about a partial read (pages OCR skipped)."""

    title: str
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ParsedDocument:
        return cls(
            title=data["title"], sections=[Section(**s) for s in data["sections"]], notes=list(data.get("notes") or [])
        )


# ---------------------------------------------------------------------------------------
# Text Groundwork accepts


def text_encoding(data: bytes) -> str:
    """The codec for text Groundwork accepts: UTF-8 (BOM optional) or UTF-16 with a BOM."""
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    return "utf-8"


def decode_text_prefix(data: bytes, *, final: bool) -> str | None:
    """Decode UTF-8 (optional BOM) or UTF-16 with a BOM; None when the bytes are neither.

    With final=False an incomplete character at the end is ignored, so a fixed-size
    head cut mid-character still passes.
    """
    decoder = codecs.getincrementaldecoder(text_encoding(data))(errors="strict")
    try:
        return decoder.decode(data, final=final)
    except UnicodeDecodeError:
        return None


def decode_text(data: bytes) -> str:
    """UTF-8 (BOM allowed) or UTF-16 with a BOM, newlines normalised to \\n.

    Raises IngestionError(DocumentErrorCode.BAD_ENCODING) for anything else or for text containing NUL.
    """
    try:
        text = data.decode(text_encoding(data))
    except UnicodeDecodeError:
        raise IngestionError(DocumentErrorCode.BAD_ENCODING, MSG_BAD_ENCODING) from None
    if "\x00" in text:
        raise IngestionError(DocumentErrorCode.BAD_ENCODING, MSG_NUL_BYTES)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def read_text(path: str) -> str:
    """The file at `path` decoded by decode_text."""
    with open(path, "rb") as f:
        return decode_text(f.read())


_BLANK_RUN = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def squeeze_blank_lines(text: str) -> str:
    return _BLANK_RUN.sub("\n\n", text)


# A word broken at a line end with a hyphen ("identi-\ncal"), and the first halves that keep
# theirs when nothing else in the text says which it is ("well-\nknown", "self-\ncontained").
_LINE_END_HYPHEN = re.compile(r"\b([A-Za-z]+)-[ \t]*\n[ \t]*([A-Za-z0-9]\w*)")
_HYPHEN_PREFIXES = frozenset(
    """well self non ill all half cross long short high low full ever so free first second
third one two three four five user end built read write run""".split()
)


def dehyphenate(text: str) -> str:
    """Line-end hyphenation joined: "identi-\ncal" becomes "identical". A hyphen before a
    capital or a digit stays ("COVID-\n19": "COVID-19"), as does one the text itself writes
    elsewhere ("well-known") or after a first half that usually keeps it ("self-"); the
    joined word wins when the text writes it elsewhere."""
    if "-" not in text:
        return text
    lowered = text.lower()

    def join(match: re.Match) -> str:
        first, second = match.group(1), match.group(2)
        if not second[0].islower() or not first[-1].islower():
            return f"{first}-{second}"
        if f"{first}{second}".lower() in lowered:
            return first + second
        if f"{first}-{second}".lower() in lowered or first.lower() in _HYPHEN_PREFIXES:
            return f"{first}-{second}"
        return first + second

    return _LINE_END_HYPHEN.sub(join, text)


# ---------------------------------------------------------------------------------------
# Sections and Markdown tables


class SectionBuilder:
    """Collects lines into sections that each start at a heading.

    A heading with no body directly followed by a deeper heading is carried into that
    subsection's text instead of becoming a section of its own.
    """

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self._stack: list[tuple[int, str]] = []
        self._lines: list[str] = []
        self._level = 0
        self._has_body = False
        self._last_tight = False

    def heading(self, level: int, text: str, line: str | None = None) -> None:
        """Start a section at a heading of `level` (1-6); `line` is its Markdown form."""
        carry = self._lines if (self._lines and not self._has_body and level > self._level) else None
        if carry is None:
            self._flush()
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, text))
        self._lines = (carry or []) + [line if line is not None else f"{'#' * level} {text}"]
        self._level = level
        self._has_body = False
        self._last_tight = False

    def line(self, text: str) -> None:
        self._lines.append(text)
        if text.strip():
            self._has_body = True

    def block(self, text: str, *, tight: bool = False) -> None:
        """A paragraph-like block, separated from the previous one by a blank line; tight
        blocks (list items) directly follow a previous tight block."""
        if not text.strip():
            return
        if self._lines and self._lines[-1] != "" and not (tight and self._last_tight):
            self._lines.append("")
        self._lines.append(text)
        self._has_body = True
        self._last_tight = tight

    def finish(self) -> list[Section]:
        self._flush()
        return self.sections

    def _flush(self) -> None:
        text = squeeze_blank_lines("\n".join(self._lines)).strip("\n")
        if text.strip():
            self.sections.append(Section(text=text, heading_path=[t for _, t in self._stack]))
        self._lines = []
        self._has_body = False


def _md_cell(value: str) -> str:
    """One Markdown table cell: a single line, pipes escaped."""
    return " ".join(value.split()).replace("|", "\\|")


def md_row(cells: list[str], width: int) -> str:
    """One Markdown table row of `width` cells; a short row is padded with empty cells."""
    return "| " + " | ".join([_md_cell(c) for c in cells] + [""] * (width - len(cells))) + " |"


def md_table(rows: list[list[str]]) -> str:
    """Rows as a Markdown table, the first row as header; short rows padded."""
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    lines = []
    for i, row in enumerate(rows):
        lines.append(md_row(row, width))
        if i == 0:
            lines.append("|" + " --- |" * width)
    return "\n".join(lines)
