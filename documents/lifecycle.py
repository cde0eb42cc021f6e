"""What documents do when a principal's access ends or an account is deleted.

Receivers of accounts.signals (accounts/ sits below documents/ and must not import it):

- `principal_access_ended`: a removed member's or a revoked key's grants to restricted
  collections are deleted in the same transaction, so nothing is left to reinstate if the
  same person is invited again or an id is reused.
- `account_deleted`: in the deleting transaction every document of the account becomes
  `deleting` (gone from lists and search at once), its grants go, a running reindex is
  cancelled, and the purge job (documents.jobs.purge_account -> documents.purge) is
  enqueued on commit.
"""

from __future__ import annotations

from documents import jobs
from documents.models import CollectionAccess, Document, ReindexRun, Status


def collection_access_end(
    sender, *, account_id: int, user_id: int | None = None, api_key_id: int | None = None, **_signal
) -> int:
    """Receiver of principal_access_ended (inside the removal's or revocation's transaction)."""
    if user_id is None and api_key_id is None:
        return 0
    rows = CollectionAccess.objects.for_account(account_id)
    rows = rows.filter(user_id=user_id) if user_id is not None else rows.filter(api_key_id=api_key_id)
    deleted, _ = rows.delete()
    return deleted


def account_documents_withdraw(sender, *, account, **_signal) -> None:
    """Receiver of account_deleted (inside the deleting transaction, in the account's context)."""
    Document.objects.for_account(account).exclude(status=Status.DELETING).update(status=Status.DELETING)
    CollectionAccess.objects.for_account(account).delete()
    ReindexRun.objects.for_account(account).filter(status=ReindexRun.RunStatus.RUNNING).update(
        status=ReindexRun.RunStatus.CANCELLED
    )
    jobs.enqueue_account_purge(account_id=account.pk)
