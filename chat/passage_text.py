"""Passage text as an answer shows it, and the facts a sentence states: reStructuredText and
MyST markup unwrapped (roles, literals, directives), repeated labels collapsed, line-end
hyphenation joined (chunks parsed before the parsers joined it), tables of contents and
index lines recognised, sentences split where sentences end (not after "Dr." or an initial),
and the names and scripts a sentence uses.

Pure text functions, no database and no model (chat.answering builds on them).
"""

from __future__ import annotations

import re
import textwrap
import unicodedata

from documents.parsing.sections import dehyphenate

_RST_ROLE = re.compile(r":[a-z:]+:`~?([^`<]+?)(?:\s*<[^>]*>)?`")
_MYST_ROLE = re.compile(r"\{[a-z][\w:-]*\}`~?([^`<]+?)(?:\s*<[^>]*>)?`")
_RST_LITERAL = re.compile(r"``([^`]+)``")
_HEADING_RULE = re.compile(r"^\s*([=\-~^\"'`#*+])\1{2,}\s*$")
# An explicit markup line: ".. note::", ".. admonition:: Title", ".. _target:", ".. comment".
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+(?:([\w-]+)::|\S)")
_MYST_FENCE = re.compile(r"^\s*(?::::+|```+)\s*\{[\w-]+\}.*$|^\s*:::+\s*$")
_OPTION = re.compile(r"^\s+:[\w-]+:")
# Directives whose body is text a reader wants (dedented); code directives keep theirs as code.
_PROSE_DIRECTIVES = frozenset(
    """note warning tip hint important attention caution danger error admonition seealso
versionadded versionchanged deprecated topic sidebar rubric""".split()
)
_CODE_DIRECTIVES = frozenset("code code-block sourcecode literalinclude doctest testcode".split())
_REPEATED_LABEL = re.compile(r"(?i)\b([a-z][a-z ]{1,30}?)s?:\s+\1s?:\s*")
# Tables of contents and indexes: "Installing packages ........ 23", "packages, 45, 67, 89".
_DOT_LEADER = re.compile(r"(?:\.\s?){4,}|(?:…\s*){2,}")
_INDEX_LINE = re.compile(
    r"^\s*[^\d\s,][^,]{0,80}?(?:,\s*[^,\d]{1,40}?)*"
    r"(?:,\s*(?:see\s+\w+|\d+(?:\s*[-–]\s*\d+)?)){2,}\s*$",
    re.I,
)
_INDEX_ENTRY = re.compile(r"^\s*[^\d\s,][^,]{0,80}?(?:,\s*[^,\d]{1,40}?)*(?:,\s*\d+(?:\s*[-–]\s*\d+)?)+\s*$")
_PAGE_NUMBER_END = re.compile(r"\S\s{3,}\d{1,4}\s*$")
# Where a sentence does not end although a full stop and a space follow.
_ABBREVIATIONS = frozenset(
    """dr mr mrs ms mx prof sr jr st no nos vs etc. e.g i.e cf approx fig figs eq ed eds vol
pp p ch sec dept inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec""".split()
)
_SENTENCE_END = re.compile(r"[.!?]+[)\"'”’]*\s+")
_WORD = re.compile(r"[a-z0-9][a-z0-9_+#'-]*")


def plain(text: str) -> str:
    """Passage text as a reader wants it: RST/MyST roles and literals unwrapped, directive
    lines dropped (an admonition's body kept as text), labels said twice said once, and
    line-end hyphenation joined."""
    text = _directives_removed(dehyphenate(text))
    text = _RST_ROLE.sub(r"`\1`", text)
    text = _MYST_ROLE.sub(r"`\1`", text)
    text = _REPEATED_LABEL.sub(lambda m: m.group(0)[: m.group(0).index(":") + 1] + " ", text)
    return _RST_LITERAL.sub(r"`\1`", text)


def _directives_removed(text: str) -> str:
    out: list[str] = []
    body = ""  # "", "prose", "code" or "drop": what the current directive's indented body is
    indent = 0
    for line in text.split("\n"):
        directive = _DIRECTIVE.match(line)
        if directive or _MYST_FENCE.match(line):
            name = (directive.group(2) or "").lower() if directive else ""
            body = (
                "prose"
                if name in _PROSE_DIRECTIVES or not directive
                else "code"
                if name in _CODE_DIRECTIVES
                else "drop"
            )
            indent = len(directive.group(1)) if directive else 0
            continue
        if body and line.strip() and len(line) - len(line.lstrip()) <= indent:
            body = ""  # the directive's body ended
        if body and (_OPTION.match(line) or body == "drop"):
            continue
        if body == "prose":
            line = line.strip() if line.strip() else ""
        out.append(line)
    return "\n".join(out)


def is_toc_line(line: str) -> bool:
    """A table-of-contents or index line: dotted leaders, a page number after a wide gap, or
    a term followed by two or more page numbers."""
    line = line.strip()
    return bool(line) and bool(_DOT_LEADER.search(line) or _PAGE_NUMBER_END.search(line) or _INDEX_LINE.match(line))


def _toc_paragraph(lines: list[str]) -> bool:
    """Most of the paragraph's lines are contents or index entries ("parsing, 12" counts too)."""
    listed = sum(1 for line in lines if is_toc_line(line) or _INDEX_ENTRY.match(line))
    return len(lines) >= 2 and listed * 2 >= len(lines)


def split_sentences(prose: str) -> list[str]:
    """Sentences of a run of prose: split after . ! or ? and a space, but not after an
    abbreviation ("Dr.", "e.g.", "vs."), an initial ("J. Smith") or inside a number ("3.11")."""
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(prose):
        if not ends_sentence(prose[: match.start() + 1]):
            continue
        pieces.append(prose[start : match.end()].strip())
        start = match.end()
    pieces.append(prose[start:].strip())
    return [p for p in pieces if p]


def ends_sentence(text: str) -> bool:
    """Whether `text`, which ends in a full stop (or ! or ?), ends a sentence there."""
    if not text.endswith("."):
        return True
    if re.search(r"(?:\.\s?){4,}$", text):
        return False  # a dotted leader ("Installing ........ 23"): the line goes on
    word = re.search(r"(\S+)\.$", text)
    if not word:
        return True
    last = word.group(1).lower().lstrip("([\"'“")
    if last in _ABBREVIATIONS or last.rstrip(".") in _ABBREVIATIONS:
        return False
    return not re.fullmatch(r"[A-Z]", word.group(1).lstrip("([\"'“"))  # an initial


def sentences(text: str) -> list[tuple[str, str]]:
    """(text, kind) for each sentence of a passage, in order: kind "prose", "heading" (a line
    underlined with a rule, or a Markdown heading), "code" (an indented paragraph, whole) or
    "table" (a Markdown table, whole). Wrapped lines are joined; tables of contents and
    index lines are left out."""
    out: list[tuple[str, str]] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [line for line in paragraph.split("\n") if line.strip()]
        if not lines or _toc_paragraph(lines):
            continue
        if all(line[:1] in (" ", "\t") for line in lines):
            out.append((textwrap.dedent("\n".join(lines)), "code"))
            continue
        if len(lines) >= 2 and _HEADING_RULE.match(lines[-1]):
            heading = " ".join(line.strip() for line in lines[:-1] if not _HEADING_RULE.match(line))
            if heading:
                out.append((heading, "heading"))
            continue
        if lines[0].lstrip().startswith("#"):
            out.append((lines[0].lstrip("# ").strip(), "heading"))
            lines = lines[1:]
        out += _prose_and_tables(lines)
    return out


def _prose_and_tables(lines: list[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    table = [line.strip() for line in lines if line.lstrip().startswith("|")]
    if table and len(table) == len(lines):
        return [("\n".join(table), "table")]
    prose = " ".join(line.strip() for line in lines if not _HEADING_RULE.match(line) and not is_toc_line(line))
    for piece in split_sentences(prose):
        if len(_WORD.findall(piece.lower())) >= 2:
            out.append((piece, "prose"))
    return out


def scripts(text: str) -> set[str]:
    """The writing systems of the letters in `text` ("LATIN", "ARABIC", "CJK", …)."""
    return {_script(ch) for ch in text if ch.isalpha()}


def _script(ch: str) -> str:
    if ch.isascii():
        return "LATIN"
    name = unicodedata.name(ch, "")
    first = name.split(" ", 1)[0]
    return {"HANGUL": "HANGUL", "CJK": "CJK", "HIRAGANA": "CJK", "KATAKANA": "CJK"}.get(first, first or "OTHER")


def names(text: str) -> set[str]:
    """The capitalised words inside a sentence (not its first word, not after a colon or a
    list mark), lower-cased: the proper nouns a small model may make up ("Makassar")."""
    found = set()
    for match in re.finditer(r"(?<![\w'’-])([A-Z][\w'’-]*[a-z][\w'’-]*)", text):
        before = text[: match.start()].rstrip()
        if before and (before[-1].isalnum() or before[-1] in ",&"):
            found.add(re.sub(r"['’]s$", "", match.group(1)).lower())
    return found


def words_lower(text: str) -> set[str]:
    """Every word of `text`, lower-cased (possessive "'s" dropped): what names are looked up in."""
    return {re.sub(r"['’]s$", "", w).lower() for w in re.findall(r"[\w'’-]+", text)}
