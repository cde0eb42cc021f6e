"""Excel workbooks (.xlsx): each sheet a table, in sections that each repeat the sheet's
header row (the CSV parser's table chunking), under the sheet's name.

openpyxl reads the workbook read-only (streamed, never loaded whole) and data-only (a
formula gives its cached value, never its formula text; nothing is ever calculated or run),
after the stored file is re-checked against the zip-bomb limits. It is imported inside
parse_xlsx, so importing this module stays cheap.

No Django here: the sandboxed child imports this module without settings.
"""

from __future__ import annotations

import datetime
import logging
import zipfile
import zlib

from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError
from documents.parsing.archives import check_office_package
from documents.parsing.csv_format import table_sections
from documents.parsing.sections import ParsedDocument

logger = logging.getLogger("groundwork.documents.parsing")

MSG_XLSX_CORRUPT = (
    "This Excel workbook is damaged and could not be read. Open it in Excel, save it again "
    "as .xlsx (or save the sheets as CSV), and upload that."
)
# Far beyond any sheet a person reads, well within the parser's memory limit.
XLSX_MAX_CELLS = 1_000_000
MSG_XLSX_TOO_MANY_CELLS = (
    f"This workbook has more than {XLSX_MAX_CELLS:,} filled cells, more than Groundwork "
    "reads from one file. Split it into smaller workbooks (or save the sheets you need as "
    "CSV) and upload those."
)
# Merged ranges are filled with their value (so every row keeps its merged label), but only
# within the rows and columns the sheet really has, and only up to this many cells.
MERGE_FILL_MAX_CELLS = 1_000_000


def parse_xlsx(path: str, fallback_title: str) -> ParsedDocument:
    """One table per non-empty sheet, in workbook order: empty rows and trailing empty
    columns dropped, merged ranges filled with their value, the first row the header that
    every section repeats; heading path [sheet name]. Hidden sheets are read too (their
    cells are in the file); chart sheets have no cells."""
    check_office_package(path, "xlsx", corrupt_message=MSG_XLSX_CORRUPT)
    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException

    try:
        # A file object, not the path: openpyxl refuses paths without an Excel extension.
        with open(path, "rb") as fileobj:
            workbook = openpyxl.load_workbook(fileobj, read_only=True, data_only=True, keep_links=False)
            try:
                sections, cells = [], 0
                for sheet in workbook.worksheets:
                    rows, cells = _sheet_rows(workbook, sheet, cells)
                    sections += table_sections(rows, heading_path=[sheet.title])
                title = (workbook.properties.title or "").strip()
            finally:
                workbook.close()
    except IngestionError:
        raise
    except (
        InvalidFileException,
        zipfile.BadZipFile,
        zlib.error,
        KeyError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        EOFError,
        SyntaxError,
    ) as exc:
        # lxml's XMLSyntaxError is a SyntaxError; openpyxl raises the others on broken parts.
        logger.warning("unreadable xlsx %s: %r", path, exc)
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_XLSX_CORRUPT) from None
    return ParsedDocument(title=title or fallback_title, sections=sections)


def _sheet_rows(workbook, sheet, cells: int) -> tuple[list[list[str]], int]:
    """The sheet's non-empty rows as cell texts (merged ranges filled), and the running count
    of filled cells in the workbook (IngestionError past XLSX_MAX_CELLS)."""
    # openpyxl's own streaming parser, so the merged ranges (which read-only worksheets do not
    # expose) come out of the same single pass over the sheet as the cells.
    from openpyxl.worksheet._reader import WorkSheetParser

    by_row: dict[int, dict[int, str]] = {}
    with sheet._get_source() as source:
        parser = WorkSheetParser(
            source,
            sheet._shared_strings,
            data_only=True,
            epoch=workbook.epoch,
            date_formats=workbook._date_formats,
            timedelta_formats=workbook._timedelta_formats,
        )
        for row_index, row in parser.parse():
            values = {cell["column"]: _cell_text(cell["value"]) for cell in row if cell["value"] is not None}
            values = {column: text for column, text in values.items() if text.strip()}
            if values:
                cells += len(values)
                if cells > XLSX_MAX_CELLS:
                    raise IngestionError(DocumentErrorCode.TOO_MANY_CELLS, MSG_XLSX_TOO_MANY_CELLS)
                by_row.setdefault(row_index, {}).update(values)
        merged = [cell_range.ref for cell_range in parser.merged_cells.mergeCell] if parser.merged_cells else []
    _fill_merged(by_row, merged)
    rows = []
    for row_index in sorted(by_row):
        values = by_row[row_index]
        rows.append([values.get(column, "") for column in range(1, max(values) + 1)])
    # Leading empty columns (a table that starts in column C) are not cells anyone reads.
    first = min((next(i for i, v in enumerate(row) if v) for row in rows), default=0)
    return [row[first:] for row in rows], cells


def _fill_merged(by_row: dict[int, dict[int, str]], refs: list[str]) -> None:
    """Give every cell of a merged range its top-left value, within the rows that exist and
    the widest row's columns (a range may claim a whole sheet)."""
    from openpyxl.utils.cell import range_boundaries

    if not by_row:
        return
    width = max(max(values) for values in by_row.values())
    budget = MERGE_FILL_MAX_CELLS
    for ref in refs:
        min_col, min_row, max_col, max_row = range_boundaries(ref)
        value = by_row.get(min_row, {}).get(min_col)
        if value is None:
            continue
        for row_index in [r for r in by_row if min_row <= r <= max_row]:
            for column in range(min_col, min(max_col, width) + 1):
                if budget <= 0:
                    return
                by_row[row_index].setdefault(column, value)
                budget -= 1


def _cell_text(value) -> str:
    """A cell value as a person reads it: 3.0 as 3, dates without a midnight time."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, datetime.datetime):
        return value.date().isoformat() if value.time() == datetime.time() else value.isoformat(sep=" ")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)
