"""Reindex runs of kinds that another app owns.

A ReindexRun of kind "reindex" is documents' own (documents/ingestion.py re-embeds the
account's documents one by one). A run of kind "migration" moves the account to another
embedding model, which is retrieval's work (retrieval/embedding_models.py). Both share the
run's row, its "one run per account" rule, the sweeper that re-queues a run whose worker
died, and the cancel: so documents runs and cancels every kind, and the app that owns a kind
registers how (in its AppConfig.ready), because documents sits below it and must not import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class RunKind:
    # The job's work: (account_id, run_id); resumable, returns when the run is no longer running.
    run: Callable[..., None]
    # Inside the cancelling transaction, with the run locked: undo what the run built.
    cancel: Callable[..., None]


_KINDS: dict[str, RunKind] = {}


def run_kind_register(kind: str, *, run: Callable[..., None], cancel: Callable[..., None]) -> None:
    _KINDS[kind] = RunKind(run=run, cancel=cancel)


def run_kind_for(kind: str) -> RunKind | None:
    """The registered owner of `kind`, or None for documents' own reindex runs."""
    return _KINDS.get(kind)
