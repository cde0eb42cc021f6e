"""CSV: rows as Markdown table rows, in sections that each repeat the header row.

Named csv_format, not csv, so that nobody mistakes it for the standard library's csv
(which `import csv` below is).
"""

from __future__ import annotations

import csv
import io

from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError
from documents.parsing.sections import ParsedDocument, Section, md_row, md_table, read_text

# Rows per CSV section are bounded by characters so that a section, header row
# included, fits into one default-sized chunk.
CSV_SECTION_CHARS = 700
CSV_FIELD_LIMIT = 16 * 1024 * 1024

MSG_CSV_CORRUPT = (
    "This CSV file could not be read as rows and columns. Export it again from your "
    "spreadsheet as CSV (UTF-8) and upload that."
)


def parse_csv(path: str, fallback_title: str) -> ParsedDocument:
    """Rows as Markdown table rows, in sections of at most ~CSV_SECTION_CHARS characters
    that each start with the header row (so every chunk carries the column names)."""
    text = read_text(path)
    previous_limit = csv.field_size_limit(CSV_FIELD_LIMIT)
    try:
        rows = [
            row
            for row in csv.reader(io.StringIO(text, newline=""), _sniff_dialect(text))
            if any(cell.strip() for cell in row)
        ]
    except csv.Error:
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_CSV_CORRUPT) from None
    finally:
        csv.field_size_limit(previous_limit)
    heading_path = [fallback_title] if fallback_title else []
    return ParsedDocument(title=fallback_title, sections=table_sections(rows, heading_path=heading_path))


def table_sections(rows: list[list[str]], *, heading_path: list[str]) -> list[Section]:
    """Non-empty `rows` (the first is the header) as Markdown table sections of at most
    ~CSV_SECTION_CHARS characters, each starting with the header row; no rows, no sections.
    Shared by CSV and XLSX (a sheet is one table)."""
    if not rows:
        return []
    width = max(len(row) for row in rows)
    header = rows[0] + [f"Column {n}" for n in range(len(rows[0]) + 1, width + 1)]
    header_md = md_table([header])
    rendered = (md_row(row, width) for row in rows[1:])
    return [
        Section(text=header_md + ("\n" + "\n".join(group) if group else ""), heading_path=list(heading_path))
        for group in _group_rows(rendered, budget=CSV_SECTION_CHARS - len(header_md) - 1)
    ]


def _sniff_dialect(text: str):
    sample = text[: 64 * 1024]
    if "\n" in sample[:-1]:
        sample = sample[: sample.rfind("\n")]  # a cut last line confuses the sniffer
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        return csv.excel


def _group_rows(rows, *, budget: int):
    """Consecutive rows in groups of total length (newlines included) <= budget; a row
    longer than the budget gets a group of its own. Yields one empty group for no rows."""
    group: list[str] = []
    used = 0
    emitted = False
    for row in rows:
        if group and used + len(row) + 1 > budget:
            yield group
            emitted = True
            group, used = [], 0
        group.append(row)
        used += len(row) + 1
    if group or not emitted:
        yield group
