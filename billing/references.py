"""What a ledger entry was for: the one place its `reference` string is built and read.

A reference names the thing that caused the entry: `document:<id>:rev<revision>` for an
ingestion charge, `conversation:<id>` for a chat hold, `message:<id>` for a chat charge and
`search` for a search-API query. The credits page turns the ones that name a page into links.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

SEARCH = "search"
_PATTERN = re.compile(r"^(?P<kind>document|conversation|message):(?P<id>\d+)(?::rev(?P<revision>\d+))?$")


@dataclass(frozen=True)
class Reference:
    kind: str  # "document", "conversation", "message", "search" or "" (free text, e.g. a grant's)
    id: int | None = None
    revision: int | None = None


def document(document_id: int, revision: int) -> str:
    return f"document:{document_id}:rev{revision}"


def document_prefix(document_id: int) -> str:
    """The start every reference to any revision of a document shares (for startswith filters)."""
    return f"document:{document_id}:"


def conversation(conversation_id: int) -> str:
    return f"conversation:{conversation_id}"


def message(message_id: int) -> str:
    return f"message:{message_id}"


def parse(reference: str) -> Reference:
    """The reference's parts; free text (or nothing) parses as kind ""."""
    reference = reference or ""
    if reference == SEARCH:
        return Reference(SEARCH)
    match = _PATTERN.match(reference)
    if match is None:
        return Reference("")
    revision = match.group("revision")
    return Reference(match.group("kind"), int(match.group("id")), int(revision) if revision else None)
