"""Where a document came from, as its API representation's `"source"`, without documents
importing the app that knows (sources/ stands on a higher floor).

That app registers one function at start-up (its AppConfig.ready):

    source_links.register(lambda document_ids: {document_id: {"id": …, "url": …}})

which answers, in one query, for those of `document_ids` that came from one of its sources.
It runs inside the caller's account context (a request, a job), so row-level security and
the tenant manager confine it to that account. The serializer asks `sources_of` once per
page of documents; a document it does not name (an upload, or nothing registered) has
`"source": null`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

SourceLookup = Callable[..., dict[int, dict]]

_lookups: list[SourceLookup] = []


def register(fn: SourceLookup) -> SourceLookup:
    """Add a lookup `fn(document_ids) -> {document_id: {"id", "url"}}` (once:
    registering the same function again does nothing). Returns `fn`, so it can decorate."""
    if fn not in _lookups:
        _lookups.append(fn)
    return fn


def unregister(fn: SourceLookup) -> None:
    """Remove a lookup (tests)."""
    if fn in _lookups:
        _lookups.remove(fn)


def sources_of(document_ids: Iterable[int]) -> dict[int, dict]:
    """{document id: {"id", "url"}} for those of `document_ids` that came from a source; {}
    when no lookup is registered or there are no ids (no query then)."""
    ids = sorted({int(i) for i in document_ids})
    found: dict[int, dict] = {}
    if not ids:
        return found
    for lookup in _lookups:
        for document_id, source in (lookup(ids) or {}).items():
            found.setdefault(int(document_id), {"id": source["id"], "url": source["url"]})
    return found
