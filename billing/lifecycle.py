"""What billing does when an account is deleted (a receiver of accounts.signals.account_deleted,
inside the deleting transaction and the account's context).

The open holds are released at once (the credits they reserved go back to the balance, with
their ledger entries); the budgets are purged by a job (billing.jobs.purge_account_budgets).
The ledger and the balance row are financial history: they are kept, append-only, with the
account's tombstone.
"""

from __future__ import annotations

from billing import jobs
from billing.models import CreditHold, HoldStatus
from billing.services import hold_release


def account_billing_close(sender, *, account, **_signal) -> int:
    """Release every open hold of the account and enqueue the budgets' purge. Returns how
    many holds it released. NOTE: a chat turn that settles its hold after this finds it
    released (`hold_closed`) and charges nothing: the account is gone, its sockets close."""
    released = 0
    for hold in CreditHold.objects.for_account(account).filter(status=HoldStatus.OPEN).order_by("pk"):
        hold_release(hold=hold)
        released += 1
    jobs.enqueue_account_purge(account_id=account.pk)
    return released
