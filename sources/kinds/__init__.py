"""The one interface every kind of source implements, and the registry of kinds.

A kind is one module (web.py, git.py; a Confluence, Drive or Notion connector would be one
more), listed once in KIND_MODULES, with a `KIND` object that has:

- `name` (the API's `kind`), `label` and `description` (what pages call it and say of it),
  `options` (the `Option`s it takes beside the URL: the API's `options`, the fields of the
  Sources page's form); everything else that names kinds (the model's choices, the API
  schema, the page) reads them from here;
- `check(*, url, options) -> (url, options)`: validate what a person gave when
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

import functools
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
    filename: str  # with the extension documents reads it by (".md", ".pdf", ...)
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


@dataclass(frozen=True)
class Option:
    """A setting a kind takes beside the URL, e.g. a Git source's branch."""

    name: str
    label: str
    example: str


class SourceKind(Protocol):
    name: str
    label: str
    description: str
    options: tuple[Option, ...]

    def check(self, *, url: str, options: dict) -> tuple[str, dict]: ...

    def open(self, source, *, known: dict[str, Known]) -> Reader: ...


# The kinds, in the order the API and the pages list them (the first is the default).
KIND_MODULES = ("sources.kinds.web", "sources.kinds.git")


@functools.cache
def registry() -> dict[str, SourceKind]:
    """Every kind by its name. Loaded on first use: the kinds' modules import no models."""
    kinds = [import_module(path).KIND for path in KIND_MODULES]
    return {kind.name: kind for kind in kinds}


def kind_for(name: str) -> SourceKind:
    return registry()[name]


def kind_names() -> tuple[str, ...]:
    return tuple(registry())


def kind_choices() -> list[tuple[str, str]]:
    """(name, label) per kind: Source.kind's choices, a callable so that a new kind needs no
    migration."""
    return [(kind.name, kind.label) for kind in registry().values()]
