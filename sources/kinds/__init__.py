"""The one interface every kind of source implements, and the registry of kinds.

A kind is one module (web.py, git.py; a Confluence, Drive or Notion connector would be one
more) with a `KIND` object that has:

- `name`, and `check(*, url, options) -> (url, options)`: validate what a person gave when
  the source is added (a 400 SourceError otherwise), normalised;
- `open(source, *, known) -> Reader`, where `known` maps each item key to what the last sync
  recorded (`Known`). The reader lists the source's items (`list_items()`, which may grow
  while items are fetched: a web page's links) and fetches one with the last sync's
  validators (`fetch_item(key)`), answering `Unchanged` (nothing downloaded, or the same
  content), `Content` (new or changed bytes, to become a document) or `Gone`.
  `close()` frees what it holds (a clone).

The sync (sources/sync.py) does the rest, the same for every kind: hashes, documents
added, replaced and deleted through documents' services, counts, the history.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import import_module
from typing import Protocol


@dataclass(frozen=True)
class Known:
    """What the last sync recorded of an item."""

    etag: str = ""
    last_modified: str = ""
    sha256: str = ""
    links: tuple[str, ...] = ()


@dataclass
class Unchanged:
    key: str
    etag: str = ""
    last_modified: str = ""


@dataclass
class Gone:
    key: str
    reason: str = ""


@dataclass
class Content:
    key: str
    url: str
    title: str
    filename: str            # with the extension documents reads it by (".md", ".pdf", ...)
    content_type: str
    data: bytes
    etag: str = ""
    last_modified: str = ""
    links: list[str] = field(default_factory=list)


@dataclass
class Skipped:
    """Could not be read this time (a timeout, a 500): kept as it was; `problem` is shown."""

    key: str
    problem: str


Fetched = Unchanged | Gone | Content | Skipped


class Reader(Protocol):
    bytes_fetched: int

    def list_items(self) -> Iterator[str]: ...

    def fetch_item(self, key: str) -> Fetched: ...

    def close(self) -> None: ...


class SourceKind(Protocol):
    name: str

    def check(self, *, url: str, options: dict) -> tuple[str, dict]: ...

    def open(self, source, *, known: dict[str, Known]) -> Reader: ...


KIND_MODULES = {"web": "sources.kinds.web", "git": "sources.kinds.git"}


def kind_for(name: str) -> SourceKind:
    return import_module(KIND_MODULES[name]).KIND
