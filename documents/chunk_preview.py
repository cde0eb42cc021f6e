"""A chunk's text as a person reads it on the document page: Markdown tables (what the CSV,
XLSX, DOCX and PPTX parsers write) become header and rows for an HTML table; everything else
stays text. Pure functions, no HTML here: the template renders the blocks, escaped."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_SEPARATOR = re.compile(r"^\s*\|(?:\s*:?-{3,}:?\s*\|)+\s*$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


@dataclass
class Block:
    """Text (`text`), or a table (`header` may be empty when the chunk starts mid-table)."""

    text: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    @property
    def is_table(self) -> bool:
        return bool(self.header or self.rows)

    @property
    def labelled_rows(self) -> list[list[tuple[str, str]]]:
        """Each row's cells with their column's header ("" without one), so a narrow screen
        can show a row as "Header: value" lines."""
        return [
            [(self.header[i] if i < len(self.header) else "", cell) for i, cell in enumerate(row)] for row in self.rows
        ]


def chunk_blocks(content: str) -> list[Block]:
    """`content` split into text blocks and table blocks, in order."""
    blocks: list[Block] = []
    lines = content.split("\n")
    i = 0
    while i < len(lines):
        if _TABLE_ROW.match(lines[i]):
            start = i
            while i < len(lines) and _TABLE_ROW.match(lines[i]):
                i += 1
            blocks.append(_table(lines[start:i]))
            continue
        start = i
        while i < len(lines) and not _TABLE_ROW.match(lines[i]):
            i += 1
        text = "\n".join(lines[start:i]).strip("\n")
        if text.strip():
            blocks.append(Block(text=text))
    return blocks


def _table(lines: list[str]) -> Block:
    header: list[str] = []
    if len(lines) >= 2 and _SEPARATOR.match(lines[1]) and not _SEPARATOR.match(lines[0]):
        header, lines = _cells(lines[0]), lines[2:]
    rows = [_cells(line) for line in lines if not _SEPARATOR.match(line)]
    width = max([len(header)] + [len(row) for row in rows])
    if header:
        header += [""] * (width - len(header))
    return Block(header=header, rows=[row + [""] * (width - len(row)) for row in rows])


def _cells(line: str) -> list[str]:
    inner = line.strip()[1:-1]
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(inner)]
