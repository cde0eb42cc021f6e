"""Parsers and the sandbox: real files generated here (PDF written by hand, DOCX with
python-docx, CSV, HTML, TXT, Markdown) and one real PDF from Debian (fixtures/README.md)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import docx
import pytest

from documents.chunking import chunk_document
from documents.errors import IngestionError
from documents.parsing import ParsedDocument, Section, parse_file, parse_in_sandbox
from documents.tests.files import DEBIAN_PDF, make_docx, make_pdf, prose_page, rewrite_pdf, write

MB = 1024 * 1024


def words(text: str) -> int:
    return len(text.split())


# --- the real PDF from Debian ---------------------------------------------------------


def test_debian_manual_pdf_parses_into_pages_with_text():
    parsed = parse_file(str(DEBIAN_PDF), "pdf", filename="camlidl-manual.pdf")
    pages = [s.page_start for s in parsed.sections]
    assert pages == list(range(1, 27))
    assert all(s.page_end == s.page_start for s in parsed.sections)
    assert parsed.title == "camlidl-manual"  # the PDF has no /Title: the file name gives it
    first = parsed.sections[0].text
    assert first.startswith("Camlidl user’s manual")
    assert "Xavier Leroy" in first and "1 Overview" in first
    assert "identified" in parsed.sections[1].text  # the "fi" ligature is spelled out
    assert "\ufb01" not in "".join(s.text for s in parsed.sections)
    assert parsed.sections[1].text.startswith("2\n")  # the page's own number, printed on it


def test_debian_manual_pdf_chunks_keep_page_ranges():
    parsed = parse_file(str(DEBIAN_PDF), "pdf", filename="camlidl-manual.pdf")
    chunks = chunk_document(parsed, size=800, overlap=200, count_tokens=words)
    assert 60 < len(chunks) < 200
    assert chunks[0].page_start == 1 and chunks[-1].page_end == 26
    page_text = {s.page_start: s.text for s in parsed.sections}
    for chunk in chunks:
        assert chunk.page_start <= chunk.page_end
        # The chunk's first and last words are on its first and last pages.
        assert chunk.content.split()[0] in page_text[chunk.page_start]
        assert chunk.content.split()[-1] in page_text[chunk.page_end]
    assert any(c.page_start != c.page_end for c in chunks)  # text flows across page breaks


# --- generated PDFs -------------------------------------------------------------------


def test_pdf_pages_title_and_page_numbers(tmp_path):
    data = make_pdf([prose_page(1), "", prose_page(3)], title="Annual Plan")
    parsed = parse_file(write(tmp_path, "x.pdf", data), "pdf", filename="plan.pdf")
    assert parsed.title == "Annual Plan"
    assert [(s.page_start, s.page_end) for s in parsed.sections] == [(1, 1), (3, 3)]
    assert parsed.sections[1].text.startswith("Page 3 sentence 0")


def test_pdf_title_falls_back_to_file_name_for_junk_metadata(tmp_path):
    data = make_pdf(["Some text here."], title="untitled")
    assert parse_file(write(tmp_path, "x.pdf", data), "pdf", filename="Board minutes.pdf").title == "Board minutes"


def test_pdf_outline_gives_heading_paths(tmp_path):
    def outline(writer):
        chapter = writer.add_outline_item(title="Chapter 1", page_number=0)
        writer.add_outline_item(title="Section 1.1", page_number=1, parent=chapter)
        writer.add_outline_item(title="Chapter 2", page_number=2)

    data = rewrite_pdf(make_pdf([prose_page(n) for n in range(1, 5)]), outline)
    parsed = parse_file(write(tmp_path, "x.pdf", data), "pdf")
    assert [s.heading_path for s in parsed.sections] == [
        ["Chapter 1"],
        ["Chapter 1", "Section 1.1"],
        ["Chapter 2"],
        ["Chapter 2"],
    ]
    chunks = chunk_document(parsed, size=800, overlap=200, count_tokens=words)
    # Chunks never mix headings; pages 3-4 (same heading) flow into each other.
    assert {(c.page_start, c.page_end) for c in chunks if c.heading_path == ["Chapter 2"]} >= {(3, 4)}
    assert all(c.page_start == c.page_end for c in chunks if c.heading_path != ["Chapter 2"])


def test_encrypted_pdf_is_refused(tmp_path):
    data = rewrite_pdf(
        make_pdf(["Secret plans."]),
        lambda w: w.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128"),
    )
    with pytest.raises(IngestionError) as info:
        parse_file(write(tmp_path, "x.pdf", data), "pdf")
    assert info.value.code == "encrypted_pdf"
    assert info.value.message == "This PDF is password-protected. Remove the password and upload it again."


def test_pdf_encrypted_with_an_empty_password_is_read(tmp_path):
    data = rewrite_pdf(
        make_pdf(["Open plans."]), lambda w: w.encrypt(user_password="", owner_password="owner", algorithm="RC4-128")
    )
    parsed = parse_file(write(tmp_path, "x.pdf", data), "pdf")
    assert parsed.sections[0].text == "Open plans."


def test_pdf_without_text_is_no_text(tmp_path):
    with pytest.raises(IngestionError) as info:
        parse_file(write(tmp_path, "x.pdf", make_pdf(["", ""])), "pdf")
    assert info.value.code == "no_text"
    # Pages without a text layer are read by OCR; these pages hold only a drawing.
    assert info.value.message.startswith(
        "This PDF has no extractable text: its pages have no text layer and OCR could not read any text on them either."
    )


@pytest.mark.parametrize("cut", [40, 300])
def test_truncated_pdf_is_corrupt(tmp_path, cut):
    data = make_pdf([prose_page(1), prose_page(2)])[:cut]
    with pytest.raises(IngestionError) as info:
        parse_file(write(tmp_path, "x.pdf", data), "pdf")
    assert info.value.code == "corrupt_file"
    assert info.value.message.startswith("This PDF is damaged and could not be read.")


def test_debian_pdf_truncated_to_half_is_corrupt_or_partial(tmp_path):
    """Cut in half, a real PDF loses its cross-reference table: either an error with a
    clear code, or the pages pypdf can still recover."""
    data = DEBIAN_PDF.read_bytes()[: DEBIAN_PDF.stat().st_size // 2]
    try:
        parsed = parse_file(write(tmp_path, "x.pdf", data), "pdf")
    except IngestionError as error:
        assert error.code in ("corrupt_file", "no_text")
    else:
        assert parsed.sections and all(s.page_start for s in parsed.sections)


# --- DOCX -----------------------------------------------------------------------------


def test_docx_headings_paragraphs_and_tables_in_order(tmp_path):
    parsed = parse_file(make_docx(tmp_path), "docx", filename="report.docx")
    assert parsed.title == "Quarterly Report"
    assert [s.heading_path for s in parsed.sections] == [[], ["Revenue"], ["Revenue", "Details"], ["Costs"]]
    assert parsed.sections[0].text == "Preface before any heading."
    assert parsed.sections[1].text == (
        "# Revenue\n\nRevenue grew in every region.\n\n"
        "| Region | Q1 | Q2 |\n| --- | --- | --- |\n| North | 10 | 12 |\n| South \\| East | 7 | 9 |\n\n"
        "After the table."
    )
    assert parsed.sections[2].text == "## Details\n\n- First bullet\n- Second bullet"
    assert all(s.page_start is None for s in parsed.sections)


def test_docx_heading_directly_followed_by_subheading_is_kept_with_it(tmp_path):
    document = docx.Document()
    document.add_heading("Part A", level=1)
    document.add_heading("Chapter 1", level=2)
    document.add_paragraph("Body.")
    document.save(tmp_path / "a.docx")
    parsed = parse_file(str(tmp_path / "a.docx"), "docx", filename="a.docx")
    assert parsed.title == "a"
    assert [(s.heading_path, s.text) for s in parsed.sections] == [
        (["Part A", "Chapter 1"], "# Part A\n## Chapter 1\n\nBody.")
    ]


@pytest.fixture(scope="module")
def zip_bomb_docx(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("bomb") / "bomb.docx"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            for _ in range(256):
                member.write(b"\0" * MB)
    return str(path)


def test_zip_bomb_docx_is_refused_before_inflating(zip_bomb_docx):
    with pytest.raises(IngestionError) as info:
        parse_file(zip_bomb_docx, "docx")
    assert info.value.code == "archive_bomb"


def test_docx_with_broken_xml_is_corrupt(tmp_path):
    path = make_docx(tmp_path)
    broken = tmp_path / "broken.docx"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(broken, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            target.writestr(item, data[: len(data) // 2] if item.filename == "word/document.xml" else data)
    with pytest.raises(IngestionError) as info:
        parse_file(str(broken), "docx")
    assert info.value.code == "corrupt_file"
    assert "Word document is damaged" in info.value.message


# --- CSV ------------------------------------------------------------------------------


def test_csv_sections_each_start_with_the_header(tmp_path):
    rows = ["id;name;notes"] + [f'{i};Person {i};"Likes; semicolons\nand newlines"' for i in range(200)]
    parsed = parse_file(write(tmp_path, "people.csv", "\n".join(rows)), "csv", filename="people.csv")
    header = "| id | name | notes |\n| --- | --- | --- |"
    assert parsed.title == "people"
    assert len(parsed.sections) > 10
    for section in parsed.sections:
        assert section.text.startswith(header + "\n| ")
        assert len(section.text) <= 700
        assert section.heading_path == ["people"]
    body = "\n".join(s.text[len(header) + 1 :] for s in parsed.sections)
    assert body.count("\n") + 1 == 200
    assert "| 0 | Person 0 | Likes; semicolons and newlines |" in body
    chunks = chunk_document(parsed, size=800, overlap=200, count_tokens=words)
    assert all(c.content.startswith(header + "\n") for c in chunks)


def test_csv_short_rows_are_padded_and_pipes_escaped(tmp_path):
    parsed = parse_file(write(tmp_path, "t.csv", "a,b,c\n1,x|y\n2,3,4,5\n"), "csv", filename="t.csv")
    assert parsed.sections[0].text == (
        "| a | b | c | Column 4 |\n| --- | --- | --- | --- |\n| 1 | x\\|y |  |  |\n| 2 | 3 | 4 | 5 |"
    )


def test_csv_header_only(tmp_path):
    parsed = parse_file(write(tmp_path, "t.csv", "a,b\n"), "csv")
    assert [s.text for s in parsed.sections] == ["| a | b |\n| --- | --- |"]
    assert parsed.sections[0].heading_path == []  # no file name given, no title


# --- HTML -----------------------------------------------------------------------------


HTML = """<!DOCTYPE html>
<html><head><title>Team &amp; Handbook</title>
<style>body { color: red } .secret { display: none }</style>
<script>var leaked = "<p>SCRIPT TEXT</p>";</script></head>
<body>
<div class="navheader"><table><tr><td>Prev</td><td>Up</td><td>NAVHEADER</td><td>Next</td></tr></table></div>
<nav><a href="/">NAV LINKS</a></nav><div role="navigation">ROLE NAV</div>
<noscript>Enable JavaScript</noscript>
<template><p>TEMPLATE TEXT</p></template>
<iframe src="x">IFRAME TEXT</iframe>
<svg viewBox="0 0 10 10"><title>SVG TITLE</title><text>SVG TEXT</text></svg>
<h1>Welcome</h1>
<p>Caf&eacute; hours are 9&ndash;5 &lt;daily&gt;.<br>Ask   at the
desk.</p>
<h2>Rules</h2>
<ul><li>Be kind</li><li>Ship it<ol><li>tests</li><li>review</li></ol></li><li><p>Rest</p></li></ul>
<p>After the list.</p>
<h3>Rooms</h3>
<table><thead><tr><th>Room</th><th>Seats</th></tr></thead>
<tbody><tr><td>Blue</td><td>8</td></tr><tr><td>Red</td><td>4</td></tr></tbody></table>
<h2>Code</h2>
<pre>def f():
    return 1</pre>
</body></html>"""


def test_html_text_headings_lists_tables(tmp_path):
    parsed = parse_file(write(tmp_path, "h.html", HTML), "html", filename="h.html")
    everything = "\n".join(s.text for s in parsed.sections)
    for hidden in (
        "SCRIPT",
        "color: red",
        "Enable JavaScript",
        "TEMPLATE",
        "IFRAME",
        "SVG",
        "leaked",
        "NAVHEADER",
        "NAV LINKS",
        "ROLE NAV",
    ):
        assert hidden not in everything
    assert parsed.title == "Team & Handbook"
    assert [s.heading_path for s in parsed.sections] == [
        ["Welcome"],
        ["Welcome", "Rules"],
        ["Welcome", "Rules", "Rooms"],
        ["Welcome", "Code"],
    ]
    assert parsed.sections[0].text == "# Welcome\n\nCafé hours are 9–5 <daily>.\nAsk at the desk."
    assert parsed.sections[1].text == (
        "## Rules\n\n- Be kind\n- Ship it\n  1. tests\n  2. review\n- Rest\n\nAfter the list."
    )
    assert parsed.sections[2].text == "### Rooms\n\n| Room | Seats |\n| --- | --- |\n| Blue | 8 |\n| Red | 4 |"
    # Preformatted text stays indented, so an answer quotes it as code, not as sentences.
    assert parsed.sections[3].text == "## Code\n\n    def f():\n        return 1"


def test_html_title_falls_back_to_first_h1_then_file_name(tmp_path):
    assert parse_file(write(tmp_path, "a.html", "<h1>Big News</h1><p>x</p>"), "html").title == "Big News"
    assert parse_file(write(tmp_path, "b.html", "<p>x</p>"), "html", filename="b.htm").title == "b"


def test_html_without_text_is_no_text(tmp_path):
    with pytest.raises(IngestionError) as info:
        parse_file(write(tmp_path, "a.html", "<script>alert(1)</script><style>p{}</style>"), "html")
    assert info.value.code == "no_text"


# --- TXT and Markdown -----------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-le-bom", "utf-16-be-bom"])
def test_txt_encodings(tmp_path, encoding):
    text = "Grüße aus Köln\r\nzweite Zeile — ok\n"
    if encoding == "utf-16-le-bom":
        data = b"\xff\xfe" + text.encode("utf-16-le")
    elif encoding == "utf-16-be-bom":
        data = b"\xfe\xff" + text.encode("utf-16-be")
    else:
        data = text.encode(encoding)
    parsed = parse_file(write(tmp_path, "a.txt", data), "txt", filename="greeting.txt")
    assert parsed == ParsedDocument(title="greeting", sections=[Section(text="Grüße aus Köln\nzweite Zeile — ok")])


def test_txt_in_latin1_is_bad_encoding(tmp_path):
    with pytest.raises(IngestionError) as info:
        parse_file(write(tmp_path, "a.txt", "café".encode("latin-1")), "txt")
    assert info.value.code == "bad_encoding"
    assert "save it as UTF-8" in info.value.message


def test_txt_with_nul_bytes_is_refused(tmp_path):
    with pytest.raises(IngestionError) as info:
        parse_file(write(tmp_path, "a.txt", b"text\x00more"), "txt")
    assert info.value.code == "bad_encoding"
    assert "NUL" in info.value.message


def test_markdown_headings_give_heading_paths(tmp_path):
    source = "\n".join(
        [
            "Intro line.",
            "",
            "# Guide",
            "Guide body.",
            "## Install #",
            "```sh",
            "# not a heading",
            "pip install x",
            "```",
            "### Linux",
            "Use apt.",
            "## Usage",
            "Run it.",
            "",
            "Setext Title",
            "============",
            "Text under setext.",
            "#hashtag is not a heading",
        ]
    )
    parsed = parse_file(write(tmp_path, "g.md", source), "markdown", filename="guide.md")
    assert parsed.title == "Guide"  # the first level-1 heading
    assert [s.heading_path for s in parsed.sections] == [
        [],
        ["Guide"],
        ["Guide", "Install"],
        ["Guide", "Install", "Linux"],
        ["Guide", "Usage"],
        ["Setext Title"],
    ]
    assert parsed.sections[2].text == "## Install #\n```sh\n# not a heading\npip install x\n```"
    assert parsed.sections[5].text == "# Setext Title\nText under setext.\n#hashtag is not a heading"


# --- round trips ----------------------------------------------------------------------


def test_markdown_title_falls_back_to_the_file_name(tmp_path):
    parsed = parse_file(write(tmp_path, "n.md", "## Only a subheading\nText."), "markdown", filename="notes.md")
    assert parsed.title == "notes"


def test_parsed_document_pickles_and_round_trips_through_json(tmp_path):
    parsed = parse_file(make_docx(tmp_path), "docx")
    assert pickle.loads(pickle.dumps(parsed)) == parsed
    assert ParsedDocument.from_dict(json.loads(json.dumps(parsed.to_dict()))) == parsed


def test_parsing_and_chunking_import_without_django():
    code = (
        "import sys, documents.kinds, documents.parsing, documents.chunking, documents.validation; "
        "assert not [m for m in sys.modules if m.split('.')[0] == 'django'], 'django imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


# --- the sandbox ----------------------------------------------------------------------


def test_sandbox_gives_the_same_result_as_in_process(tmp_path):
    path = make_docx(tmp_path)
    assert parse_in_sandbox(path, "docx", filename="report.docx") == parse_file(path, "docx", filename="report.docx")
    assert parse_in_sandbox(str(DEBIAN_PDF), "pdf") == parse_file(str(DEBIAN_PDF), "pdf")


def test_sandbox_passes_parser_errors_through(tmp_path):
    data = rewrite_pdf(make_pdf(["Secret."]), lambda w: w.encrypt("pw", algorithm="RC4-128"))
    with pytest.raises(IngestionError) as info:
        parse_in_sandbox(write(tmp_path, "x.pdf", data), "pdf")
    assert info.value.code == "encrypted_pdf"


def test_sandbox_zip_bomb(zip_bomb_docx):
    with pytest.raises(IngestionError) as info:
        parse_in_sandbox(zip_bomb_docx, "docx", timeout_s=30, memory_mb=256)
    assert info.value.code == "archive_bomb"


@pytest.fixture(scope="module")
def huge_text(tmp_path_factory) -> str:
    """33 MB of Markdown with 1.5 million headings: about 8 s and over 300 MB to parse."""
    path = tmp_path_factory.mktemp("huge") / "huge.md"
    path.write_text("# H\nshort line of text.\n" * 1_500_000)
    return str(path)


def test_sandbox_memory_limit(huge_text):
    started = time.monotonic()
    with pytest.raises(IngestionError) as info:
        parse_in_sandbox(huge_text, "markdown", timeout_s=30, memory_mb=120)
    assert info.value.code == "parse_failed_resources"
    assert "too large or complex" in info.value.message
    assert time.monotonic() - started < 20


def test_sandbox_timeout(huge_text):
    started = time.monotonic()
    with pytest.raises(IngestionError) as info:
        parse_in_sandbox(huge_text, "markdown", timeout_s=1, memory_mb=2048)
    assert info.value.code == "parse_timeout"
    assert info.value.message.startswith("Reading this file took longer than 1 s")
    assert time.monotonic() - started < 5


def test_sandbox_unexpected_error_is_parse_failed_without_details(tmp_path, caplog):
    missing = str(tmp_path / "gone.txt")
    with pytest.raises(IngestionError) as info:
        parse_in_sandbox(missing, "txt")
    assert info.value.code == "parse_failed"
    assert "could not be read" in info.value.message
    assert "Traceback" not in info.value.message and "gone.txt" not in info.value.message
    assert "FileNotFoundError" in caplog.text  # the details are logged for the operator


def test_sandbox_reports_a_child_killed_by_a_signal(tmp_path, monkeypatch):
    """A child that dies without a report (segfault, OOM killer) is a resources failure."""
    from documents.parsing import sandbox

    real_popen = subprocess.Popen

    def fake_popen(command, **kwargs):
        return real_popen(
            [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    monkeypatch.setattr(sandbox.subprocess, "Popen", fake_popen)
    with pytest.raises(IngestionError) as info:
        sandbox.parse_in_sandbox(write(tmp_path, "a.txt", "x"), "txt")
    assert info.value.code == "parse_failed_resources"


def test_sandbox_refuses_unknown_kinds():
    with pytest.raises(ValueError):
        parse_in_sandbox("/dev/null", "exe")


# --- speed ----------------------------------------------------------------------------


def test_hundred_page_pdf_parses_and_chunks_within_the_sandbox_limits(tmp_path):
    """Within the sandbox's default time and memory limits (how fast: bench ingestion)."""
    path = write(tmp_path, "long.pdf", make_pdf([prose_page(n, sentences=40) for n in range(1, 101)]))
    parsed = parse_in_sandbox(path, "pdf")
    chunks = chunk_document(parsed, size=800, overlap=200, count_tokens=words)
    assert len(parsed.sections) == 100
    assert chunks[-1].page_end == 100
