"""Deleting an account: the confirmation and the deletion itself."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.models import Account, ApiKey, Invitation, Membership, User
from accounts.permissions import Action
from accounts.services.members import _lock_memberships, _require_manager
from accounts.signals import account_deleted
from audit.services import audit_record
from core import sockets
from core.tenancy import account_context


def account_delete_confirmation_check(*, account: Account, confirm) -> None:
    """The person typed the account's name (surrounding spaces aside; case matters, as the
    page asks for exactly the name), or an AccountError naming what is missing."""
    if not isinstance(confirm, str) or not confirm.strip():
        raise AccountError(
            AccountErrorCode.CONFIRMATION_REQUIRED,
            f"Type the account's name, “{account.name}”, to confirm that it should be deleted.",
            field="confirm",
        )
    if confirm.strip() != account.name.strip():
        raise AccountError(
            AccountErrorCode.CONFIRMATION_MISMATCH,
            f"The confirmation does not match the account's name. Type “{account.name}” exactly to delete it.",
            field="confirm",
        )


@transaction.atomic
def account_delete(*, account: Account, actor: User) -> Account:
    """Delete an account (owners only: Action.ACCOUNT_DELETE), in one transaction.

    The account is marked deleted and stays as a tombstone (its credit ledger and audit log
    are kept, append-only); every API key is revoked, every membership and pending
    invitation removed, nobody has it as their last account; `account_deleted` lets billing
    release the open holds and each app enqueue the job that purges its data (documents and
    their files, conversations, collections, budgets). On commit every open socket of the
    account closes (4401). Deleting a deleted account changes nothing.
    """
    # The account's own context, without a principal: the apps' receivers must reach every
    # row (restricted collections too), not what the deleting owner happens to see.
    with account_context(account):
        _require_manager(account=account, actor=actor, action=Action.ACCOUNT_DELETE)
        # NOTE: locked, so two owners deleting at once (or a role change racing the delete)
        # run one after the other; the second finds the tombstone and returns it.
        account = Account.objects.select_for_update().get(pk=account.pk)
        if account.deleted_at is not None:
            return account
        _lock_memberships(account)
        now = timezone.now()
        keys_revoked = ApiKey.objects.for_account(account).filter(revoked_at__isnull=True).update(revoked_at=now)
        members = Membership.objects.for_account(account)
        members_removed = members.count()
        members.delete()
        invitations_cancelled, _ = Invitation.objects.for_account(account).filter(accepted_at__isnull=True).delete()
        User.objects.filter(last_account=account).update(last_account=None)
        account.deleted_at = now
        account.save(update_fields=["deleted_at"])
        audit_record(
            account=account,
            action="account.delete",
            actor=actor,
            target=account.name,
            detail={
                "members_removed": members_removed,
                "keys_revoked": keys_revoked,
                "invitations_cancelled": invitations_cancelled,
            },
        )
        account_deleted.send(sender=Account, account=account, actor=actor)
        sockets.account_sockets_close_on_commit(account.pk)
    return account
