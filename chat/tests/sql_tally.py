"""Counts what the app sends PostgreSQL, from every thread: statements and commits.

A pass-through spy on psycopg's cursor and connection (nothing is changed or faked), so it
also sees what Django's execute_wrapper cannot: the signed tenant context (core/tenancy.py
writes it through a raw psycopg cursor), savepoints, and COMMITs. Used by the chat turn's
statement-budget test and by bench/chat_open_loop.py.

A statement run in autocommit mode (outside any transaction) is a transaction of its own
and is counted as one in `transactions`, besides the explicit commits.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import psycopg


@dataclass
class Tally:
    statements: list[str] = field(default_factory=list)
    commits: int = 0
    rollbacks: int = 0
    autocommit_statements: int = 0
    health_checks: int = 0  # the pool's empty liveness queries, not statements of the app
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def transactions(self) -> int:
        return self.commits + self.rollbacks + self.autocommit_statements

    def snapshot(self) -> dict:
        with self.lock:
            return {
                "statements": len(self.statements),
                "commits": self.commits,
                "autocommit_statements": self.autocommit_statements,
                "rollbacks": self.rollbacks,
                "health_checks": self.health_checks,
                "sql": list(self.statements),
            }


class sql_tally:
    """`with sql_tally() as tally: ...`: every statement, commit and rollback of any thread
    while the block runs."""

    def __enter__(self) -> Tally:
        self.tally = tally = Tally()
        self.saved = (
            psycopg.Cursor.execute,
            psycopg.Cursor.executemany,
            psycopg.Connection.commit,
            psycopg.Connection.rollback,
        )
        execute, executemany, commit, rollback = self.saved

        def note(cursor, query):
            text = query.decode() if isinstance(query, bytes) else str(query)
            with tally.lock:
                if not str(text).strip():
                    # psycopg_pool's check as it lends a connection (CONN_HEALTH_CHECKS): an
                    # empty query, no work for the server, counted apart (docs/operations/reliability.md).
                    tally.health_checks += 1
                    return
                tally.statements.append(" ".join(str(text).split())[:160])
                if cursor.connection.autocommit:
                    tally.autocommit_statements += 1

        def spy_execute(cursor, query, *args, **kwargs):
            note(cursor, query)
            return execute(cursor, query, *args, **kwargs)

        def spy_executemany(cursor, query, *args, **kwargs):
            note(cursor, query)
            return executemany(cursor, query, *args, **kwargs)

        def spy_commit(conn):
            with tally.lock:
                tally.commits += 1
            return commit(conn)

        def spy_rollback(conn):
            with tally.lock:
                tally.rollbacks += 1
            return rollback(conn)

        psycopg.Cursor.execute, psycopg.Cursor.executemany = spy_execute, spy_executemany
        psycopg.Connection.commit, psycopg.Connection.rollback = spy_commit, spy_rollback
        return tally

    def __exit__(self, *exc) -> None:
        (psycopg.Cursor.execute, psycopg.Cursor.executemany, psycopg.Connection.commit, psycopg.Connection.rollback) = (
            self.saved
        )
