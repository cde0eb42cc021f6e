"""Real files for the tests, made here: PDFs written by hand (pypdf adds outlines and
encryption), DOCX with python-docx; plus the real Debian PDF in fixtures/."""

from __future__ import annotations

import io
from pathlib import Path

import docx
import pypdf

FIXTURES = Path(__file__).parent / "fixtures"
DEBIAN_PDF = FIXTURES / "camlidl-manual.pdf"


def make_pdf(pages: list[str], *, title: str | None = None) -> bytes:
    """A valid PDF with one Helvetica text page per item of `pages` (lines split on
    newlines; an empty string gives a page with a drawing and no text)."""
    objects: dict[int, bytes] = {}
    page_ids = [4 + 2 * i for i in range(len(pages))]
    objects[1] = b"<< /Type /Catalog /Pages 2 0 R >>"
    kids = b" ".join(b"%d 0 R" % page_id for page_id in page_ids)
    objects[2] = b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % len(pages)
    objects[3] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    for page_id, text in zip(page_ids, pages):
        operations = [b"BT /F1 11 Tf 14 TL 50 780 Td"]
        for line in text.split("\n"):
            escaped = line.encode("cp1252").replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
            operations.append(b"(" + escaped + b") Tj T*")
        operations.append(b"ET")
        stream = b"\n".join(operations) if text else b"0 0 1 rg 10 10 100 100 re f"
        objects[page_id] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (page_id + 1)
        )
        objects[page_id + 1] = b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"
    info_id = None
    if title is not None:
        info_id = max(objects) + 1
        objects[info_id] = b"<< /Title (" + title.encode("cp1252") + b") >>"
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    xref = len(out)
    size = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number]
    info = b" /Info %d 0 R" % info_id if info_id else b""
    out += b"trailer\n<< /Size %d /Root 1 0 R" % size + info + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def rewrite_pdf(data: bytes, change) -> bytes:
    """Copy a PDF through pypdf's writer, letting `change(writer)` add outlines or encryption."""
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(data)))
    change(writer)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def prose_page(number: int, sentences: int = 12) -> str:
    lines = []
    for s in range(sentences):
        lines.append(f"Page {number} sentence {s} talks about subject{number} and keeps the reader informed.")
    return "\n".join(lines)


def write(tmp_path: Path, name: str, data: bytes | str) -> str:
    path = tmp_path / name
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return str(path)


def make_docx(tmp_path: Path) -> str:
    document = docx.Document()
    document.core_properties.title = "Quarterly Report"
    document.add_paragraph("Preface before any heading.")
    document.add_heading("Revenue", level=1)
    document.add_paragraph("Revenue grew in every region.")
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate([("Region", "Q1", "Q2"), ("North", "10", "12"), ("South | East", "7", "9")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("After the table.")
    document.add_heading("Details", level=2)
    document.add_paragraph("First bullet", style="List Bullet")
    document.add_paragraph("Second bullet", style="List Bullet")
    document.add_heading("Costs", level=1)
    document.add_paragraph("Costs fell.")
    path = tmp_path / "report.docx"
    document.save(path)
    return str(path)


def docx_bytes(tmp_path: Path) -> bytes:
    return Path(make_docx(tmp_path)).read_bytes()
