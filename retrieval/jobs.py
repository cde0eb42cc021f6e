"""django-rq entry points for retrieval: the search-index cron job and the per-account index
that goes with a deleted account. Thin: take ids, call retrieval's functions."""

from __future__ import annotations

import django_rq
from django.db import transaction
from rq import Retry

from retrieval.search.maintenance import ensure_tenant_vector_index, tenant_vector_indexes_refresh


def refresh_search_indexes() -> dict[int, str]:
    """Cron: give each large account its own HNSW index, drop those of accounts that shrank."""
    return tenant_vector_indexes_refresh()


def drop_account_vector_index(*, account_id: int) -> str:
    """A deleted account's own HNSW index goes: its documents are all `deleting` (none is
    visible), so the account counts as empty and loses it. Idempotent."""
    return ensure_tenant_vector_index(account_id)


def account_vector_index_withdraw(sender, *, account, **_signal) -> None:
    """Receiver of accounts.signals.account_deleted (inside the deleting transaction): the
    index is dropped by a job once that transaction has committed."""
    account_id = account.pk
    transaction.on_commit(
        lambda: django_rq.get_queue("default").enqueue(
            drop_account_vector_index, kwargs={"account_id": account_id}, retry=Retry(max=3, interval=[10, 30, 90])
        )
    )
