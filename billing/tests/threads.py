"""Spenders at the same instant: the ledger's race tests run work(n) in n threads that a
barrier releases together, each on its own database connection (closed when it ends)."""

from __future__ import annotations

import threading

from django.db import connection


def run_at_once(work, threads: int) -> list[Exception]:
    """Run work(0) … work(threads - 1) together; the exceptions they raised, which a
    thread would otherwise lose (a test asserts there are none)."""
    errors: list[Exception] = []
    barrier = threading.Barrier(threads)

    def run(n):
        try:
            barrier.wait()
            work(n)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    started = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    return errors
