"""parse_file: read a stored file of a registered kind in this process, with the parser
the kind registry (documents.kinds) names.

No Django here: the sandboxed child imports this module without settings.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError
from documents.kinds import IMAGE_KIND_NAMES, KINDS
from documents.parsing.sections import ParsedDocument

MSG_NO_TEXT = "This file contains no text to search."

Parser = Callable[[str, str], ParsedDocument]


def _load_parser(reference: str) -> Parser:
    """The function named by a registry's "package.module:function" reference."""
    module_name, _, function_name = reference.partition(":")
    return getattr(importlib.import_module(module_name), function_name)


# Resolved when this module is imported, so a registry entry naming a missing parser fails
# at startup (and in the tests), not on the first upload of that kind.
PARSERS: dict[str, Parser] = {kind.name: _load_parser(kind.parser) for kind in KINDS}


def parse_file(path: str, kind: str, *, filename: str | None = None) -> ParsedDocument:
    """Parse `path` as `kind` in this process. Raises IngestionError for files that cannot
    be read; other exceptions mean a bug or an unexpected library failure.

    `filename` is the display name (the stored path has a random name): it gives the
    title when the file has none. Without it the title may be "".
    """
    if kind not in PARSERS:
        raise ValueError(f"unknown document kind {kind!r}")
    parsed = PARSERS[kind](path, _title_from_filename(filename))
    # The PDF parser refuses a PDF without text itself, with a message about scans. An image
    # without text may still be described by a vision model: the ingestion decides.
    if kind not in IMAGE_KIND_NAMES and not any(section.text.strip() for section in parsed.sections):
        raise IngestionError(DocumentErrorCode.NO_TEXT, MSG_NO_TEXT)
    return parsed


def _title_from_filename(filename: str | None) -> str:
    if not filename:
        return ""
    base = re.split(r"[/\\]", filename)[-1]
    stem, dot, _ = base.rpartition(".")
    return (stem if dot and stem else base).strip()
