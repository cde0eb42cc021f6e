"""What a ledger entry was for: the one place its `reference` string is built and read.

A reference names the thing that caused the entry: `document:<id>:rev<revision>` for an
ingestion charge, `conversation:<id>` for a chat hold, `message:<id>` for a chat charge and
`search` for a search-API query. The credits page turns the ones that name a page into links.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

SEARCH = "search"
# What a reference to a thing the reader may not see reads as ("document:hidden"): a document
# in a restricted collection they are not given, or one deleted since.
HIDDEN = "hidden"
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


def purchase(purchase_id: int) -> str:
    """Credits bought (billing/purchases): the grant, and what a refund took back. Free text to
    the page (no link)."""
    return f"purchase:{purchase_id}"


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


# kind -> (account, ids) -> the ids the transaction's principal may read. The app that owns the
# kind registers it in its AppConfig.ready (billing sits below it and must not import it).
_READABLE: dict[str, Callable[..., set[int]]] = {}


def readable_register(kind: str, readable: Callable[..., set[int]]) -> None:
    _READABLE[kind] = readable


def as_seen(*, account, references: Iterable[str]) -> dict[str, str]:
    """Each reference as the principal of the transaction may see it: one naming a thing it
    may not read becomes `<kind>:hidden` (the ledger shows that a document was charged, never
    which one). One query per kind for all of them."""
    parsed = {reference: parse(reference) for reference in set(references)}
    wanted: dict[str, set[int]] = defaultdict(set)
    for ref in parsed.values():
        if ref.kind in _READABLE and ref.id is not None:
            wanted[ref.kind].add(ref.id)
    readable = {kind: _READABLE[kind](account=account, ids=ids) for kind, ids in wanted.items()}
    return {
        reference: (f"{ref.kind}:{HIDDEN}" if ref.kind in readable and ref.id not in readable[ref.kind] else reference)
        for reference, ref in parsed.items()
    }
