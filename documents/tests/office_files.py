"""Real spreadsheets and slide decks for the tests, made with their libraries: openpyxl
(sheets, merged cells, empty sheets), XlsxWriter (formulas with the cached values Excel
stores; openpyxl cannot write those) and python-pptx (slides, tables, notes)."""

from __future__ import annotations

import datetime
import io

import openpyxl
import pptx
import xlsxwriter
from pptx.util import Inches


def make_xlsx() -> bytes:
    """Three sheets: "Staff" (a header and 40 rows, a merged team label spanning rows),
    an empty "Notes" sheet, and "Budget" with a merged title row and dates."""
    workbook = openpyxl.Workbook()
    staff = workbook.active
    staff.title = "Staff"
    staff.append(["Name", "Team", "Extension", "Started"])
    for n in range(1, 41):
        staff.append([f"Person {n:02d}", "Platform" if n <= 20 else None, 4000 + n, datetime.date(2020, 1, n % 28 + 1)])
    staff.merge_cells("B2:B21")  # "Platform" for persons 01-20
    workbook.create_sheet("Notes")
    budget = workbook.create_sheet("Budget")
    budget.append(["Line", "Amount"])
    budget.append(["Zebra crossings", 1250.5])
    budget.append(["Quokka enclosure", 99])
    workbook.properties.title = "Facilities 2026"
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def make_xlsx_with_formulas() -> bytes:
    """A sheet whose totals are formulas with the cached values a spreadsheet program stores,
    and one formula without a cached value (as openpyxl writes them)."""
    out = io.BytesIO()
    workbook = xlsxwriter.Workbook(out, {"in_memory": True})
    sheet = workbook.add_worksheet("Invoice")
    sheet.write_row(0, 0, ["Item", "Qty", "Price", "Total"])
    sheet.write_row(1, 0, ["Marmalade", 3, 4])
    sheet.write_formula(1, 3, "=B2*C2", None, 12)
    sheet.write_row(2, 0, ["Teapot", 2, 15])
    sheet.write_formula(2, 3, "=B3*C3", None, 30)
    sheet.write_formula(3, 3, "=SUM(D2:D3)", None, 42)
    sheet.write(3, 0, "Grand total")
    workbook.close()
    return out.getvalue()


def make_pptx(slides: int = 3) -> bytes:
    """Slide 1: a title slide; slide 2: bullets, a table and speaker notes; further slides:
    a title and one line each."""
    deck = pptx.Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[0])
    first.shapes.title.text = "Quarterly review"
    first.placeholders[1].text = "Operations team"
    second = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    second.shapes.title.text = "Warehouse metrics"
    box = second.shapes.add_textbox(Inches(1), Inches(1.5), Inches(8), Inches(1)).text_frame
    box.text = "Pallets moved rose sharply"
    point = box.add_paragraph()
    point.text = "Night shift added in March"
    point.level = 1
    table = second.shapes.add_table(3, 2, Inches(1), Inches(3), Inches(6), Inches(1.5)).table
    for r, row in enumerate([["Site", "Pallets"], ["Leeds", "1200"], ["Bristol", "950"]]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    second.notes_slide.notes_text_frame.text = "Mention the forklift recall before the numbers."
    for n in range(3, slides + 1):
        slide = deck.slides.add_slide(deck.slide_layouts[5])
        slide.shapes.title.text = f"Topic {n}"
        slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(1)).text_frame.text = f"Detail number {n}"
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def make_docx_bytes() -> bytes:
    """A small Word document (to rename as a spreadsheet or a deck)."""
    import docx

    document = docx.Document()
    document.add_paragraph("A letter, not a spreadsheet.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
