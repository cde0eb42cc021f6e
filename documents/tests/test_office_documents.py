"""Spreadsheets (.xlsx) and slide decks (.pptx), made with their own libraries: what the
parsers read (sheets, merged cells, cached formula values, empty sheets; slides, tables,
notes), that they become searchable with the sheet name / slide number in the citation, and
that mislabelled files and zip bombs are refused with a clear message."""

from __future__ import annotations

import io
import zipfile

import openpyxl
import pytest

from accounts.tests.factories import make_api_key
from documents.chunking import chunk_document
from documents.errors import IngestionError, UploadRejected
from documents.parsing import parse_file, parse_in_sandbox
from documents.parsing.xlsx import XLSX_MAX_CELLS
from documents.tests.files import write
from documents.tests.office_files import make_docx_bytes, make_pptx, make_xlsx, make_xlsx_with_formulas
from documents.validation import validate_upload

XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX_TYPE = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


def _validate(name: str, data: bytes, declared: str | None = None):
    stream = io.BytesIO(data)
    return validate_upload(
        name=name,
        declared_type=declared,
        data_head=data[:8192],
        size=len(data),
        max_bytes=25 * 1024 * 1024,
        open_file=lambda: stream,
    )


def _rejected(name: str, data: bytes) -> UploadRejected:
    with pytest.raises(UploadRejected) as caught:
        _validate(name, data)
    return caught.value


def _words(text: str) -> int:
    return len(text.split())


def _parse(tmp_path, data: bytes, kind: str, name: str):
    return parse_file(write(tmp_path, "stored", data), kind, filename=name)


# --- XLSX -----------------------------------------------------------------------------


def test_each_sheet_is_a_table_whose_header_every_section_repeats(tmp_path):
    parsed = _parse(tmp_path, make_xlsx(), "xlsx", "facilities.xlsx")
    assert parsed.title == "Facilities 2026"
    sheets = [section.heading_path for section in parsed.sections]
    # The empty "Notes" sheet gives nothing; the others keep workbook order.
    assert {tuple(path) for path in sheets} == {("Staff",), ("Budget",)} and sheets[-1] == ["Budget"]
    staff = [section.text for section in parsed.sections if section.heading_path == ["Staff"]]
    assert len(staff) > 1
    for text in staff:
        assert text.startswith("| Name | Team | Extension | Started |\n| --- | --- | --- | --- |")
    everything = "\n".join(staff)
    # Every Staff row once, the merged "Platform" cell given to every row it spans, dates as dates.
    assert all(f"| Person {n:02d} |" in everything for n in range(1, 41))
    assert everything.count("| Platform |") == 20 and "| Person 20 | Platform | 4020 | 2020-01-21 |" in everything
    assert "| Person 21 |  | 4021 |" in everything
    budget = next(section.text for section in parsed.sections if section.heading_path == ["Budget"])
    assert "| Zebra crossings | 1250.5 |" in budget and "| Quokka enclosure | 99 |" in budget


def test_every_chunk_of_a_sheet_carries_the_header(tmp_path):
    parsed = _parse(tmp_path, make_xlsx(), "xlsx", "facilities.xlsx")
    chunks = [
        c for c in chunk_document(parsed, size=300, overlap=50, count_tokens=_words) if c.heading_path == ["Staff"]
    ]
    assert len(chunks) > 3
    assert all(c.content.startswith("| Name | Team | Extension | Started |") for c in chunks)


def test_formulas_give_their_cached_values_never_their_text(tmp_path):
    parsed = _parse(tmp_path, make_xlsx_with_formulas(), "xlsx", "invoice.xlsx")
    text = parsed.sections[0].text
    assert "| Marmalade | 3 | 4 | 12 |" in text and "| Grand total |  |  | 42 |" in text
    assert "=" not in text.replace("| --- |", "")
    # A formula no program has calculated (openpyxl writes none) is an empty cell, not "=A2*2".
    workbook = openpyxl.Workbook()
    workbook.active.append(["Amount", "Double"])
    workbook.active.append([21, "=A2*2"])
    out = io.BytesIO()
    workbook.save(out)
    text = _parse(tmp_path, out.getvalue(), "xlsx", "raw.xlsx").sections[0].text
    assert "| 21 |  |" in text and "A2" not in text


def test_a_workbook_of_empty_sheets_has_no_text(tmp_path):
    workbook = openpyxl.Workbook()
    workbook.create_sheet("Also empty")
    out = io.BytesIO()
    workbook.save(out)
    with pytest.raises(IngestionError) as caught:
        _parse(tmp_path, out.getvalue(), "xlsx", "blank.xlsx")
    assert caught.value.code == "no_text"


def test_a_sheet_claiming_a_huge_merge_fills_only_the_cells_it_has(tmp_path):
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.append(["Label", "Value"])
    sheet.append(["Everything", 1])
    sheet.merge_cells("A2:B2")
    out = io.BytesIO()
    workbook.save(out)
    # Claim the whole sheet in the file itself (openpyxl would build every merged cell in memory).
    text = (
        _parse(
            tmp_path,
            _rewrite_part(
                out.getvalue(),
                "xl/worksheets/sheet1.xml",
                lambda xml: xml.replace(b'ref="A2:B2"', b'ref="A2:XFD1048576"'),
            ),
            "xlsx",
            "huge.xlsx",
        )
        .sections[0]
        .text
    )
    assert text.splitlines()[2] == "| Everything | Everything |"


def _rewrite_part(data: bytes, name: str, change) -> bytes:
    original = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in original.infolist():
            content = original.read(item)
            archive.writestr(item, change(content) if item.filename == name else content)
    return out.getvalue()


def test_a_workbook_past_the_cell_limit_is_refused_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr("documents.parsing.xlsx.XLSX_MAX_CELLS", 50)
    with pytest.raises(IngestionError) as caught:
        _parse(tmp_path, make_xlsx(), "xlsx", "facilities.xlsx")
    assert caught.value.code == "too_many_cells" and "Split it" in caught.value.message
    assert XLSX_MAX_CELLS == 1_000_000


def test_xlsx_is_parsed_the_same_in_the_sandbox(tmp_path):
    path = write(tmp_path, "stored", make_xlsx())
    assert parse_in_sandbox(path, "xlsx", filename="f.xlsx") == parse_file(path, "xlsx", filename="f.xlsx")


# --- PPTX -----------------------------------------------------------------------------


def test_a_slide_per_section_with_title_text_table_and_notes(tmp_path):
    parsed = _parse(tmp_path, make_pptx(slides=4), "pptx", "review.pptx")
    assert [(s.heading_path, s.page_start, s.page_end) for s in parsed.sections] == [
        (["Quarterly review"], 1, 1),
        (["Warehouse metrics"], 2, 2),
        (["Topic 3"], 3, 3),
        (["Topic 4"], 4, 4),
    ]
    second = parsed.sections[1].text
    assert second.startswith("# Warehouse metrics\n\nPallets moved rose sharply\n- Night shift added in March")
    assert "| Site | Pallets |\n| --- | --- |\n| Leeds | 1200 |\n| Bristol | 950 |" in second
    assert second.endswith("Speaker notes: Mention the forklift recall before the numbers.")
    assert "Operations team" in parsed.sections[0].text


def test_slide_numbers_survive_chunking_and_the_sandbox(tmp_path):
    path = write(tmp_path, "stored", make_pptx(slides=3))
    parsed = parse_in_sandbox(path, "pptx", filename="review.pptx")
    assert parsed == parse_file(path, "pptx", filename="review.pptx")
    chunks = chunk_document(parsed, count_tokens=_words)
    assert {(c.page_start, c.page_end) for c in chunks if "forklift" in c.content} == {(2, 2)}


# --- Validation: mislabelled files and bombs -------------------------------------------


@pytest.mark.parametrize("declared", [XLSX_TYPE, "application/zip", "application/octet-stream", None])
def test_xlsx_and_pptx_are_accepted(declared):
    assert _validate("budget.xlsx", make_xlsx(), declared).kind == "xlsx"
    assert _validate("deck.pptx", make_pptx(), None if declared == XLSX_TYPE else declared).kind == "pptx"


@pytest.mark.parametrize(
    "name, data, says",
    [
        ("report.xlsx", "docx", "is a Word (.docx) file (a Word document). Rename it with the .docx extension"),
        ("deck.pptx", "xlsx", "is an Excel (.xlsx) file (an Excel workbook). Rename it with the .xlsx extension"),
        ("budget.xlsx", "pptx", "is a PowerPoint (.pptx) file"),
        ("letter.docx", "xlsx", "is an Excel (.xlsx) file"),
    ],
)
def test_an_office_file_renamed_to_another_office_type_is_refused_naming_what_it_is(name, data, says):
    files = {"docx": make_docx_bytes, "xlsx": make_xlsx, "pptx": make_pptx}
    error = _rejected(name, files[data]())
    assert (error.code, error.status) == ("type_mismatch", 415)
    assert says in error.message and error.message.startswith(name)


def test_a_zip_or_a_damaged_file_named_xlsx_is_refused():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("xl/workbook.xml", b"<workbook/>")  # the part, but no [Content_Types].xml
    error = _rejected("sheet.xlsx", out.getvalue())
    assert error.code == "type_mismatch" and "without an Excel workbook inside" in error.message
    error = _rejected("deck.pptx", make_pptx()[:300])
    assert error.code == "type_mismatch" and "Open it in PowerPoint" in error.message
    error = _rejected("sheet.xlsx", b"%PDF-1.4\n" + b"x" * 100)
    assert error.code == "type_mismatch" and "a PDF" in error.message


def _bomb(kind: str) -> bytes:
    """A real file of `kind` plus one part that inflates to 256 MB of zeros (~260 KB packed)."""
    original = zipfile.ZipFile(io.BytesIO(make_xlsx() if kind == "xlsx" else make_pptx()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in original.infolist():
            archive.writestr(item, original.read(item))
        with archive.open("media/zeros.bin", "w", force_zip64=True) as member:
            block = b"\0" * (1024 * 1024)
            for _ in range(256):
                member.write(block)
    return out.getvalue()


@pytest.mark.parametrize("kind, noun", [("xlsx", "Excel workbook"), ("pptx", "PowerPoint presentation")])
def test_zip_bombs_are_refused_at_upload_and_when_parsed(kind, noun, tmp_path):
    bomb = _bomb(kind)
    assert len(bomb) < 2 * 1024 * 1024
    error = _rejected(f"bomb.{kind}", bomb)
    assert (error.code, error.status) == ("archive_bomb", 400)
    assert "cannot be processed safely" in error.message and f"real {noun}" in error.message
    with pytest.raises(IngestionError) as caught:
        parse_in_sandbox(write(tmp_path, "stored", bomb), kind, filename=f"bomb.{kind}")
    assert caught.value.code == "archive_bomb"


# --- End to end: uploaded, ingested, searchable, cited ----------------------------------


@pytest.mark.django_db
def test_spreadsheets_and_slides_are_searchable_with_sheet_and_slide_in_the_results(
    client, account_a, account_b, fake_llm, upload_and_ingest
):
    sheet = upload_and_ingest(account_a, "facilities.xlsx", make_xlsx(), XLSX_TYPE)
    deck = upload_and_ingest(account_a, "review.pptx", make_pptx(), PPTX_TYPE)
    assert (sheet.status, deck.status) == ("ready", "ready"), (sheet.error, deck.error)
    assert (sheet.content_type, deck.content_type) == (XLSX_TYPE, PPTX_TYPE)
    key = make_api_key(account_a)

    def search(query, key=key):
        response = client.post(
            "/api/v1/search/", {"query": query}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}"
        )
        assert response.status_code == 200, response.content
        return response.json()["results"]

    hit = next(r for r in search("forklift recall") if r["document_id"] == deck.pk)
    assert hit["pages"] == [2, 2] and "forklift recall" in hit["text"]
    hit = next(r for r in search("Quokka enclosure") if r["document_id"] == sheet.pk)
    assert hit["pages"] is None and "| Line | Amount |" in hit["text"] and "Quokka" in hit["text"]
    detail = client.get(f"/api/v1/documents/{sheet.pk}/", HTTP_AUTHORIZATION=f"Bearer {key}").json()
    assert {tuple(c["heading_path"]) for c in detail["chunks"]} == {("Staff",), ("Budget",)}
    # Another account finds none of it.
    assert search("forklift recall", key=make_api_key(account_b)) == []
