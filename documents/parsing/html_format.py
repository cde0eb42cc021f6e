"""HTML: headings, paragraphs, lists and tables (as Markdown tables) from the page's text.

Named html_format, not html, so that nobody mistakes it for the standard library's html
(whose html.parser this module uses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

from documents.parsing.sections import ParsedDocument, SectionBuilder, md_table, read_text

_SKIPPED_TAGS = {"script", "style", "noscript", "template", "iframe", "svg", "math", "object"}
_BLOCK_TAGS = {
    "p",
    "div",
    "section",
    "article",
    "header",
    "footer",
    "main",
    "nav",
    "aside",
    "blockquote",
    "pre",
    "ul",
    "ol",
    "li",
    "dl",
    "dt",
    "dd",
    "form",
    "fieldset",
    "figure",
    "figcaption",
    "address",
    "details",
    "summary",
    "hr",
    "caption",
    "body",
    "html",
    "table",
    "tr",
    "td",
    "th",
    "thead",
    "tbody",
    "tfoot",
}
# Navigation, not content: <nav>, role="navigation", and the class names documentation
# generators give their page headers and footers (DocBook's navheader/navfooter: "Prev | Up |
# Home | Next" tables that answered a question about creating a database).
_NAV_CLASSES = {
    "navheader",
    "navfooter",
    "navbar",
    "breadcrumb",
    "breadcrumbs",
    "related",
    "sphinxsidebar",
    "toc-sidebar",
    "skip-link",
}
# Marks a <br> in collected text; NUL never occurs in decoded input (decode_text refuses it).
_BR = "\x00"


@dataclass
class _TableState:
    """An HTML table being read: finished rows of cell texts, and the open cell's text."""

    rows: list[list[str]] = field(default_factory=list)
    cell: list[str] | None = None

    def close_cell(self) -> None:
        if self.cell is not None:
            if not self.rows:
                self.rows.append([])
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None


class _HtmlText(HTMLParser):
    """Streams HTML into a SectionBuilder: headings, paragraphs, list items and tables
    (as Markdown tables); skips script, style, noscript, template, iframe, svg, math and
    object; <title> gives the title. Entities are decoded by HTMLParser (convert_charrefs)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.builder = SectionBuilder()
        self.title_parts: list[str] = []
        self.first_h1 = ""
        self._skip_depth = 0
        self._skip_tag: str | None = None
        self._in_title = False
        self._pre = 0
        self._buffer: list[str] = []
        self._heading_level = 0
        self._lists: list[list] = []  # [kind, counter] per open <ul>/<ol>
        self._prefix = ""
        self._tables: list[_TableState] = []  # the open tables, innermost last

    def handle_starttag(self, tag, attrs):
        if self._skip_depth:
            if tag == self._skip_tag:
                self._skip_depth += 1
            return
        if tag in _SKIPPED_TAGS or _is_navigation(tag, attrs):
            self._skip_tag, self._skip_depth = tag, 1
            return
        if tag == "title":
            self._in_title = True
        elif tag == "br":
            self._data(_BR)
        elif self._tables and tag in ("td", "th", "tr", "table"):
            self._table_start(tag)
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6") and not self._tables:
            self._flush()
            self._heading_level = int(tag[1])
        elif tag in _BLOCK_TAGS:
            self._block_start(tag)

    def handle_startendtag(self, tag, attrs):
        # <svg/> and <br/> open nothing that needs closing.
        if tag == "br" and not self._skip_depth:
            self._data(_BR)

    def handle_endtag(self, tag):
        if self._skip_depth:
            if tag == self._skip_tag:
                self._skip_depth -= 1
            return
        if tag == "title":
            self._in_title = False
        elif self._tables and tag in ("td", "th", "tr", "table"):
            self._table_end(tag)
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6") and self._heading_level:
            self._flush()
        elif tag in ("ul", "ol", "li"):
            self._flush()
            self._prefix = ""
            if tag != "li" and self._lists:
                self._lists.pop()
        elif tag == "pre":
            self._flush()
            self._pre = max(0, self._pre - 1)
        elif tag in _BLOCK_TAGS:
            self._flush()

    def handle_data(self, data):
        if self._skip_depth:
            return
        if self._in_title:
            self.title_parts.append(data)
            return
        self._data(data)

    def close(self):
        super().close()
        while self._tables:
            self._table_end("table")
        self._flush()

    def _data(self, data: str) -> None:
        if self._tables and self._tables[-1].cell is not None:
            self._tables[-1].cell.append(data)
        else:
            self._buffer.append(data)

    def _block_start(self, tag: str) -> None:
        self._flush()
        if tag in ("ul", "ol"):
            self._lists.append([tag, 0])
        elif tag == "li":
            depth = max(len(self._lists), 1)
            marker = "-"
            if self._lists and self._lists[-1][0] == "ol":
                self._lists[-1][1] += 1
                marker = f"{self._lists[-1][1]}."
            self._prefix = "  " * (depth - 1) + marker + " "
        elif tag == "pre":
            self._pre += 1
        elif tag == "table":
            self._tables.append(_TableState())

    def _table_start(self, tag: str) -> None:
        table = self._tables[-1]
        if tag == "table":
            # A nested table is read on its own and becomes text of the enclosing cell.
            self._tables.append(_TableState())
        elif tag == "tr":
            table.close_cell()
            table.rows.append([])
        else:
            table.close_cell()
            if not table.rows:
                table.rows.append([])
            table.cell = []

    def _table_end(self, tag: str) -> None:
        table = self._tables[-1]
        table.close_cell()
        if tag != "table":
            return
        self._tables.pop()
        if self._tables:
            text = " ".join(cell for row in table.rows for cell in row if cell)
            self._data(f" {text} ")
            return
        self._flush()
        self.builder.block(md_table(table.rows))

    def _flush(self) -> None:
        """End the current paragraph, heading or list item."""
        raw = "".join(self._buffer)
        self._buffer = []
        if self._pre:
            # Preformatted text (code, a program's output) stays a block of its own, indented,
            # so an answer quotes it as code instead of reading "city | temp_lo" as a sentence.
            text = "\n".join("    " + line for line in raw.replace(_BR, "\n").strip("\n").split("\n"))
        else:
            lines = (" ".join(part.split()) for part in raw.split(_BR))
            text = "\n".join(line for line in lines if line)
        level, self._heading_level = self._heading_level, 0
        if not text.strip():
            return  # a list marker waits for the item's first text (<li><p>...)
        prefix, self._prefix = self._prefix, ""
        if level:
            heading = " ".join(text.split())
            if level == 1 and not self.first_h1:
                self.first_h1 = heading
            self.builder.heading(level, heading)
        else:
            self.builder.block(prefix + text, tight=bool(prefix))


def _is_navigation(tag: str, attrs) -> bool:
    attributes = dict(attrs)
    classes = set((attributes.get("class") or "").lower().split())
    return tag == "nav" or (attributes.get("role") or "").lower() == "navigation" or bool(classes & _NAV_CLASSES)


def parse_html(path: str, fallback_title: str) -> ParsedDocument:
    """Headings, paragraphs, lists and tables from an HTML file; title from <title>,
    else the first <h1>, else the file name."""
    text = read_text(path)
    extractor = _HtmlText()
    extractor.feed(text)
    extractor.close()
    title = " ".join("".join(extractor.title_parts).split()) or extractor.first_h1 or fallback_title
    return ParsedDocument(title=title, sections=extractor.builder.finish())
