"""Turn a stored upload into text sections, in a resource-limited child process.

`parse_in_sandbox` is the entry point for the pipeline: it runs `python -m documents.parsing`
with an address-space limit, a CPU-time limit and a wall-clock timeout, and turns every
way the child can fail into an IngestionError with a message for the uploader.
`parse_file` is the same parse in-process (for tests and trusted callers).

No Django here, on purpose: the child process imports this module without settings.
"""
from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import re
import resource
import signal
import subprocess
import sys
import traceback
import zipfile
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from typing import Callable

from documents.errors import IngestionError
from documents.validation import archive_bomb_message, text_encoding, zip_bomb_problem

logger = logging.getLogger("groundwork.documents.parsing")

KINDS = ("pdf", "docx", "txt", "markdown", "csv", "html")

# Rows per CSV section are bounded by characters so that a section, header row
# included, fits into one default-sized chunk.
CSV_SECTION_CHARS = 700
CSV_FIELD_LIMIT = 16 * 1024 * 1024

MSG_ENCRYPTED = "This PDF is password-protected. Remove the password and upload it again."
MSG_PDF_NO_TEXT = "This PDF has no extractable text (a scanned PDF needs OCR first)."
MSG_PDF_CORRUPT = ("This PDF is damaged and could not be read. Open it in a PDF viewer, save or print it "
                   "to a new PDF, and upload that.")
MSG_DOCX_CORRUPT = ("This Word document is damaged and could not be read. Open it in Word, save it again "
                    "as .docx (or as PDF), and upload that.")
MSG_CSV_CORRUPT = ("This CSV file could not be read as rows and columns. Export it again from your "
                   "spreadsheet as CSV (UTF-8) and upload that.")
MSG_NO_TEXT = "This file contains no text to search."
MSG_BAD_ENCODING = ("This file is not valid UTF-8 text. Open it in a text editor, save it as UTF-8, "
                    "and upload it again.")
MSG_NUL_BYTES = ("This file contains binary data (NUL bytes), so it is not plain text. Save it as UTF-8 "
                 "text and upload it again.")
MSG_RESOURCES = ("This file is too large or complex to read within Groundwork's memory limit. Split it "
                 "into smaller files or save it in a simpler format (PDF or plain text), and upload again.")
MSG_FAILED = ("This file could not be read. Check that it opens on your computer, save it again "
              "(or as PDF), and upload it again.")


def timeout_message(timeout_s: float) -> str:
    return (f"Reading this file took longer than {timeout_s:g} s, so Groundwork stopped. Split it into "
            "smaller files or save it in a simpler format (PDF or plain text), and upload again.")


@dataclass
class Section:
    """A run of text under one heading path; pages are 1-based and inclusive (None: no pages)."""
    text: str
    heading_path: list[str] = field(default_factory=list)
    page_start: int | None = None
    page_end: int | None = None


@dataclass
class ParsedDocument:
    """What a parser found: a title ("" when none was found) and sections in reading order."""
    title: str
    sections: list[Section] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ParsedDocument:
        return cls(title=data["title"], sections=[Section(**s) for s in data["sections"]])


# ---------------------------------------------------------------------------------------
# Entry points


def parse_file(path: str, kind: str, *, filename: str | None = None) -> ParsedDocument:
    """Parse `path` as `kind` in this process. Raises IngestionError for files that cannot
    be read; other exceptions mean a bug or an unexpected library failure.

    `filename` is the display name (the stored path has a random name): it gives the
    title when the file has none. Without it the title may be "".
    """
    if kind not in PARSERS:
        raise ValueError(f"unknown document kind {kind!r}")
    fallback_title = _title_from_filename(filename)
    parsed = PARSERS[kind](path, fallback_title)
    if not any(section.text.strip() for section in parsed.sections):
        raise IngestionError("no_text", MSG_PDF_NO_TEXT if kind == "pdf" else MSG_NO_TEXT)
    return parsed


def parse_in_sandbox(path: str, kind: str, *, timeout_s: float = 60, memory_mb: int = 1024,
                     filename: str | None = None) -> ParsedDocument:
    """Parse in a child process limited to `memory_mb` of address space and `timeout_s`
    of wall-clock and CPU time. Returns the ParsedDocument or raises IngestionError:
    the parser's own errors unchanged, "parse_timeout", "parse_failed_resources" (out
    of memory, killed by a signal) or "parse_failed" (anything else; details go to the
    log, never into the message). Never raises anything else for a bad file.
    """
    if kind not in PARSERS:
        raise ValueError(f"unknown document kind {kind!r}")
    # "--opt=value" and "--" keep a file name or path that starts with "-" an argument.
    command = [sys.executable, "-m", "documents.parsing", "--child", f"--memory-mb={int(memory_mb)}",
               f"--cpu-s={max(1, math.ceil(timeout_s))}"]
    if filename:
        command.append(f"--filename={filename}")
    command += ["--", os.path.abspath(path), kind]  # the child runs in the project root
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=_child_env(), cwd=_PROJECT_ROOT)
    except OSError:
        logger.exception("could not start the parser process for %s", path)
        raise IngestionError("parse_failed", MSG_FAILED) from None
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate()
        logger.warning("parsing %s (%s) timed out after %ss; stderr tail: %s", path, kind, timeout_s,
                       _tail(err))
        raise IngestionError("parse_timeout", timeout_message(timeout_s)) from None
    finally:
        # Whatever interrupts the wait (a job being cancelled), the child does not outlive it.
        if child.poll() is None:
            child.kill()
            child.wait()
    return _interpret_child(path, kind, child.returncode, out, err, timeout_s)


def _interpret_child(path: str, kind: str, returncode: int, out: bytes, err: bytes,
                     timeout_s: float) -> ParsedDocument:
    """Map the child's exit status and report to a ParsedDocument or an IngestionError."""
    payload = _load_payload(out)
    if payload is not None and payload.get("ok"):
        try:
            return ParsedDocument.from_dict(payload["document"])
        except (KeyError, TypeError):
            logger.exception("parser for %s (%s) sent a malformed report", path, kind)
            raise IngestionError("parse_failed", MSG_FAILED) from None
    if payload is not None:
        code = payload.get("code", "parse_failed")
        if code == "parse_failed":
            logger.error("parsing %s (%s) failed: %s\n%s", path, kind, payload.get("detail", ""), _tail(err))
            raise IngestionError("parse_failed", MSG_FAILED)
        if code == "parse_failed_resources":
            logger.warning("parsing %s (%s) ran out of resources: %s", path, kind, payload.get("detail", ""))
            raise IngestionError(code, MSG_RESOURCES)
        raise IngestionError(code, payload.get("message") or MSG_FAILED)
    if returncode < 0:
        signum = -returncode
        logger.warning("parser for %s (%s) was killed by signal %s; stderr tail: %s", path, kind,
                       _signal_name(signum), _tail(err))
        if signum == signal.SIGXCPU:
            raise IngestionError("parse_timeout", timeout_message(timeout_s))
        raise IngestionError("parse_failed_resources", MSG_RESOURCES)
    if b"MemoryError" in err:
        logger.warning("parser for %s (%s) ran out of memory; stderr tail: %s", path, kind, _tail(err))
        raise IngestionError("parse_failed_resources", MSG_RESOURCES)
    logger.error("parser for %s (%s) exited with %s and no report; stderr tail: %s", path, kind,
                 returncode, _tail(err))
    raise IngestionError("parse_failed", MSG_FAILED)


def _load_payload(out: bytes) -> dict | None:
    try:
        payload = json.loads(out)
    except (ValueError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child_env() -> dict[str, str]:
    """The parent's environment with the project importable from the child."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PROJECT_ROOT, env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _tail(err: bytes, limit: int = 4000) -> str:
    return err[-limit:].decode("utf-8", "replace")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


# ---------------------------------------------------------------------------------------
# The child process


def _child_main(argv: list[str]) -> int:
    """Run one parse under resource limits and print one JSON report on stdout:
    {"ok": true, "document": {...}} or {"ok": false, "code": ..., "message"/"detail": ...}."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m documents.parsing")
    parser.add_argument("--child", action="store_true", required=True)
    parser.add_argument("path")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--memory-mb", type=int, default=1024)
    parser.add_argument("--cpu-s", type=int, default=60)
    parser.add_argument("--filename", default=None)
    args = parser.parse_args(argv)

    _apply_limits(memory_mb=args.memory_mb, cpu_s=args.cpu_s)
    # Libraries that print would corrupt the report: stdout goes to stderr, the report to
    # a private copy of the original stdout.
    report = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    # Freed on MemoryError so that the failure can still be reported.
    reserve = bytearray(2 * 1024 * 1024)
    try:
        parsed = parse_file(args.path, args.kind, filename=args.filename)
        text = json.dumps({"ok": True, "document": parsed.to_dict()}, ensure_ascii=False)
        del parsed
    except IngestionError as exc:
        text = json.dumps({"ok": False, "code": exc.code, "message": exc.message})
    except (MemoryError, RecursionError) as exc:
        del reserve
        text = json.dumps({"ok": False, "code": "parse_failed_resources", "detail": type(exc).__name__})
    except Exception as exc:
        traceback.print_exc()
        text = json.dumps({"ok": False, "code": "parse_failed", "detail": f"{type(exc).__name__}: {exc}"[:2000]})
    report.write(text)
    report.flush()
    return 0


def _apply_limits(*, memory_mb: int, cpu_s: int) -> None:
    """Address space, CPU seconds (SIGXCPU at the soft limit, SIGKILL one second later), no core files."""
    _lower_limit(resource.RLIMIT_AS, memory_mb * 1024 * 1024, memory_mb * 1024 * 1024)
    _lower_limit(resource.RLIMIT_CPU, cpu_s, cpu_s + 1)
    _lower_limit(resource.RLIMIT_CORE, 0, 0)


def _lower_limit(which: int, soft: int, hard: int) -> None:
    """Set a limit, never above an existing hard limit (raising it would fail)."""
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


# ---------------------------------------------------------------------------------------
# Shared helpers


def _title_from_filename(filename: str | None) -> str:
    if not filename:
        return ""
    base = re.split(r"[/\\]", filename)[-1]
    stem, dot, _ = base.rpartition(".")
    return (stem if dot and stem else base).strip()


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def decode_text(data: bytes) -> str:
    """UTF-8 (BOM allowed) or UTF-16 with a BOM, newlines normalised to \\n.

    Raises IngestionError("bad_encoding") for anything else or for text containing NUL.
    """
    try:
        text = data.decode(text_encoding(data))
    except UnicodeDecodeError:
        raise IngestionError("bad_encoding", MSG_BAD_ENCODING) from None
    if "\x00" in text:
        raise IngestionError("bad_encoding", MSG_NUL_BYTES)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


class _SectionBuilder:
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
        text = _squeeze_blank_lines("\n".join(self._lines)).strip("\n")
        if text.strip():
            self.sections.append(Section(text=text, heading_path=[t for _, t in self._stack]))
        self._lines = []
        self._has_body = False


_BLANK_RUN = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def _squeeze_blank_lines(text: str) -> str:
    return _BLANK_RUN.sub("\n\n", text)


def _md_cell(value: str) -> str:
    """One Markdown table cell: a single line, pipes escaped."""
    return " ".join(value.split()).replace("|", "\\|")


def _md_table(rows: list[list[str]]) -> str:
    """Rows as a Markdown table, the first row as header; short rows padded."""
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    lines = []
    for i, row in enumerate(rows):
        cells = [_md_cell(c) for c in row] + [""] * (width - len(row))
        lines.append("| " + " | ".join(cells) + " |")
        if i == 0:
            lines.append("|" + " --- |" * width)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Plain text and Markdown


def parse_txt(path: str, fallback_title: str) -> ParsedDocument:
    """The whole text as one section without headings."""
    text = _squeeze_blank_lines(decode_text(_read_bytes(path))).strip("\n")
    return ParsedDocument(title=fallback_title, sections=[Section(text=text)] if text.strip() else [])


_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_NOT_SETEXT_TEXT = re.compile(r"^ {0,3}(?:[-*+>|]|\d+[.)]\s|#)")


def parse_markdown(path: str, fallback_title: str) -> ParsedDocument:
    """Sections split at ATX (#) and setext (===/---) headings outside fenced code; the
    title is the first level-1 heading, else the file name."""
    lines = decode_text(_read_bytes(path)).split("\n")
    builder = _SectionBuilder()
    title = ""
    fence: str | None = None
    previous_blank = True
    i = 0
    while i < len(lines):
        line = lines[i]
        fence_match = _FENCE.match(line)
        if fence is not None:
            if fence_match and fence_match.group(1)[0] == fence[0] and len(fence_match.group(1)) >= len(fence):
                fence = None
            builder.line(line)
        elif fence_match:
            fence = fence_match.group(1)
            builder.line(line)
        elif (heading := _ATX.match(line)) and (text := (heading.group(2) or "").strip()):
            builder.heading(len(heading.group(1)), text, line.strip())
            title = title or (text if len(heading.group(1)) == 1 else "")
        elif (previous_blank and line.strip() and i + 1 < len(lines) and _SETEXT.match(lines[i + 1])
              and not _NOT_SETEXT_TEXT.match(line)):
            level = 1 if lines[i + 1].strip().startswith("=") else 2
            builder.heading(level, line.strip(), f"{'#' * level} {line.strip()}")
            title = title or (line.strip() if level == 1 else "")
            i += 1
        else:
            builder.line(line)
        previous_blank = not line.strip()
        i += 1
    return ParsedDocument(title=title or fallback_title, sections=builder.finish())


# ---------------------------------------------------------------------------------------
# CSV


def parse_csv(path: str, fallback_title: str) -> ParsedDocument:
    """Rows as Markdown table rows, in sections of at most ~CSV_SECTION_CHARS characters
    that each start with the header row (so every chunk carries the column names)."""
    text = decode_text(_read_bytes(path))
    previous_limit = csv.field_size_limit(CSV_FIELD_LIMIT)
    try:
        rows = [row for row in csv.reader(io.StringIO(text, newline=""), _sniff_dialect(text))
                if any(cell.strip() for cell in row)]
    except csv.Error:
        raise IngestionError("corrupt_file", MSG_CSV_CORRUPT) from None
    finally:
        csv.field_size_limit(previous_limit)
    if not rows:
        return ParsedDocument(title=fallback_title, sections=[])
    width = max(len(row) for row in rows)
    header = rows[0] + [f"Column {n}" for n in range(len(rows[0]) + 1, width + 1)]
    header_md = _md_table([header])
    rendered = ("| " + " | ".join([_md_cell(c) for c in row] + [""] * (width - len(row))) + " |"
                for row in rows[1:])
    heading_path = [fallback_title] if fallback_title else []
    sections = [Section(text=header_md + ("\n" + "\n".join(group) if group else ""), heading_path=list(heading_path))
                for group in _group_rows(rendered, budget=CSV_SECTION_CHARS - len(header_md) - 1)]
    return ParsedDocument(title=fallback_title, sections=sections)


def _sniff_dialect(text: str):
    sample = text[:64 * 1024]
    if "\n" in sample[:-1]:
        sample = sample[:sample.rfind("\n")]  # a cut last line confuses the sniffer
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


# ---------------------------------------------------------------------------------------
# HTML


_SKIPPED_TAGS = {"script", "style", "noscript", "template", "iframe", "svg", "math", "object"}
_BLOCK_TAGS = {"p", "div", "section", "article", "header", "footer", "main", "nav", "aside", "blockquote",
               "pre", "ul", "ol", "li", "dl", "dt", "dd", "form", "fieldset", "figure", "figcaption",
               "address", "details", "summary", "hr", "caption", "body", "html", "table", "tr", "td",
               "th", "thead", "tbody", "tfoot"}
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
    """Streams HTML into a _SectionBuilder: headings, paragraphs, list items and tables
    (as Markdown tables); skips script, style, noscript, template, iframe, svg, math and
    object; <title> gives the title. Entities are decoded by HTMLParser (convert_charrefs)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.builder = _SectionBuilder()
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
        if tag in _SKIPPED_TAGS:
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
        self.builder.block(_md_table(table.rows))

    def _flush(self) -> None:
        """End the current paragraph, heading or list item."""
        raw = "".join(self._buffer)
        self._buffer = []
        if self._pre:
            text = raw.replace(_BR, "\n").strip("\n")
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


def parse_html(path: str, fallback_title: str) -> ParsedDocument:
    """Headings, paragraphs, lists and tables from an HTML file; title from <title>,
    else the first <h1>, else the file name."""
    text = decode_text(_read_bytes(path))
    extractor = _HtmlText()
    extractor.feed(text)
    extractor.close()
    title = " ".join("".join(extractor.title_parts).split()) or extractor.first_h1 or fallback_title
    return ParsedDocument(title=title, sections=extractor.builder.finish())


# ---------------------------------------------------------------------------------------
# DOCX


_HEADING_STYLE = re.compile(r"^heading\s*([1-6])$", re.IGNORECASE)


def parse_docx(path: str, fallback_title: str) -> ParsedDocument:
    """Paragraphs and tables in body order; Heading 1-6 (or outline-level) paragraphs
    become Markdown headings and the heading path; tables become Markdown tables."""
    _check_archive(path)
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from lxml.etree import XMLSyntaxError

    try:
        document = docx.Document(path)
        builder = _SectionBuilder()
        title = ""
        for item in document.iter_inner_content():
            if isinstance(item, Table):
                builder.block(_md_table(_docx_table_rows(item)))
                continue
            text = item.text.strip()
            if not text:
                continue
            style_name = _style_name(item)
            if style_name.lower() == "title" and not title:
                title = " ".join(text.split())
            level = _docx_heading_level(item, style_name)
            if level:
                builder.heading(level, " ".join(text.split()))
            else:
                prefix = _docx_list_prefix(item, style_name)
                builder.block(prefix + text, tight=bool(prefix))
        core_title = (document.core_properties.title or "").strip()
    except (PackageNotFoundError, XMLSyntaxError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        logger.warning("unreadable docx %s: %s", path, exc)
        raise IngestionError("corrupt_file", MSG_DOCX_CORRUPT) from None
    return ParsedDocument(title=core_title or title or fallback_title, sections=builder.finish())


def _check_archive(path: str) -> None:
    """Re-check the zip-bomb limits: validation saw the upload, this is the stored file."""
    try:
        with zipfile.ZipFile(path) as archive:
            problem = zip_bomb_problem(archive)
            has_document = "word/document.xml" in archive.namelist()
    except zipfile.BadZipFile:
        raise IngestionError("corrupt_file", MSG_DOCX_CORRUPT) from None
    if problem:
        raise IngestionError("archive_bomb", archive_bomb_message("This file", problem))
    if not has_document:
        raise IngestionError("corrupt_file", MSG_DOCX_CORRUPT)


def _style_name(paragraph) -> str:
    try:
        style = paragraph.style
    except (KeyError, ValueError):
        return ""
    return (style.name or "") if style is not None else ""


def _docx_heading_level(paragraph, style_name: str) -> int:
    """1-6 for a heading paragraph, else 0: by the built-in style name, or by the outline
    level set on the paragraph or its style chain (which also catches localised or custom
    heading styles)."""
    match = _HEADING_STYLE.match(style_name.strip())
    if match:
        return int(match.group(1))
    level = _outline_level(paragraph._p.pPr)
    style = getattr(paragraph, "style", None)
    depth = 0
    while level is None and style is not None and depth < 10:
        level = _outline_level(style.element.pPr)
        style = style.base_style
        depth += 1
    return level + 1 if level is not None and 0 <= level <= 5 else 0


def _outline_level(ppr) -> int | None:
    if ppr is None or ppr.outlineLvl is None:
        return None
    try:
        return int(ppr.outlineLvl.val)
    except (TypeError, ValueError):
        return None


def _docx_list_prefix(paragraph, style_name: str) -> str:
    lowered = style_name.lower()
    if lowered.startswith("list number"):
        return "1. "
    if lowered.startswith("list") or (paragraph._p.pPr is not None and paragraph._p.pPr.numPr is not None):
        return "- "
    return ""


def _docx_table_rows(table) -> list[list[str]]:
    """Cell texts per row; a merged cell (repeated by python-docx) counts once."""
    rows = []
    for row in table.rows:
        cells, seen = [], set()
        for cell in row.cells:
            if id(cell._tc) in seen:
                continue
            seen.add(id(cell._tc))
            cells.append(cell.text)
        rows.append(cells)
    return rows


# ---------------------------------------------------------------------------------------
# PDF


_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                            "\ufb05": "st", "\ufb06": "st", "\x00": ""})
_TRAILING_SPACE = re.compile(r"[ \t]+\n")
_JUNK_TITLES = re.compile(r"^(untitled|document\d*|microsoft word - .*|slide \d+|\W*)$", re.IGNORECASE)

# What pypdf raises on malformed input besides its own errors (it parses untrusted
# structure with plain Python code).
_PDF_DAMAGE = (ValueError, KeyError, TypeError, IndexError, AttributeError, AssertionError,
               UnicodeError, OverflowError, ZeroDivisionError, EOFError)


def parse_pdf(path: str, fallback_title: str) -> ParsedDocument:
    """One section per page with text, pages 1-based; heading paths from the outline
    (bookmarks) when there is one. Raises encrypted_pdf, corrupt_file or no_text."""
    import pypdf
    from pypdf.errors import DependencyError, PyPdfError

    damage = (PyPdfError,) + _PDF_DAMAGE
    try:
        reader = pypdf.PdfReader(path)
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            raise IngestionError("encrypted_pdf", MSG_ENCRYPTED)
        page_count = len(reader.pages)
    except (IngestionError, DependencyError):
        raise
    except damage as exc:
        logger.warning("unreadable pdf %s: %r", path, exc)
        raise IngestionError("corrupt_file", MSG_PDF_CORRUPT) from None
    if page_count == 0:
        raise IngestionError("corrupt_file", MSG_PDF_CORRUPT)
    paths = _pdf_heading_paths(reader, page_count, damage)
    sections, failed = [], 0
    for number in range(1, page_count + 1):
        try:
            text = reader.pages[number - 1].extract_text() or ""
        except damage as exc:
            # One bad page should not cost the whole document.
            logger.warning("pdf %s page %s unreadable: %r", path, number, exc)
            failed += 1
            continue
        text = _clean_pdf_text(text)
        if text:
            sections.append(Section(text=text, heading_path=paths[number - 1], page_start=number, page_end=number))
    if failed == page_count:
        raise IngestionError("corrupt_file", MSG_PDF_CORRUPT)
    if not any(any(ch.isalnum() for ch in s.text) for s in sections):
        raise IngestionError("no_text", MSG_PDF_NO_TEXT)
    return ParsedDocument(title=_pdf_title(reader, damage) or fallback_title, sections=sections)


def _clean_pdf_text(text: str) -> str:
    text = text.translate(_LIGATURES).replace("\r\n", "\n").replace("\r", "\n")
    text = _TRAILING_SPACE.sub("\n", text)
    return _squeeze_blank_lines(text).strip()


def _pdf_title(reader, damage) -> str:
    try:
        metadata = reader.metadata
        title = (metadata.title if metadata else None) or ""
    except damage:
        return ""
    title = " ".join(str(title).split())
    if title.lower().startswith("microsoft word - "):
        title = title[len("microsoft word - "):]
    return "" if _JUNK_TITLES.match(title) else title


def _pdf_heading_paths(reader, page_count: int, damage) -> list[list[str]]:
    """Per page (0-based), the outline path of the last bookmark starting on or before
    it; [] everywhere when the PDF has no usable outline."""
    entries: list[tuple[int, list[str]]] = []

    def walk(items, parents: list[str], depth: int) -> None:
        previous_path = parents
        for item in items:
            if isinstance(item, list):
                if depth < 6:
                    walk(item, previous_path, depth + 1)
                continue
            title = " ".join(str(getattr(item, "title", "") or "").split())
            page = reader.get_destination_page_number(item)
            previous_path = parents + [title] if title else parents
            if title and page is not None and 0 <= page < page_count:
                entries.append((page, previous_path))

    try:
        walk(reader.outline, [], 1)
    except damage + (RecursionError,) as exc:
        logger.info("ignoring unusable pdf outline: %r", exc)
        return [[] for _ in range(page_count)]
    entries.sort(key=lambda entry: entry[0])  # stable: same-page bookmarks keep their order
    paths: list[list[str]] = []
    current: list[str] = []
    position = 0
    for page in range(page_count):
        while position < len(entries) and entries[position][0] <= page:
            current = entries[position][1]
            position += 1
        paths.append(list(current))
    return paths


PARSERS: dict[str, Callable[[str, str], ParsedDocument]] = {
    "pdf": parse_pdf,
    "docx": parse_docx,
    "txt": parse_txt,
    "markdown": parse_markdown,
    "csv": parse_csv,
    "html": parse_html,
}


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
