"""Reads for accounts. Every selector takes the account (or user) explicitly."""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Account, ApiKey, Invitation, Membership, User
from accounts.tokens import secret_authenticate
from core.tenancy import user_context


def membership_list_for_user(*, user: User) -> list[Membership]:
    """The user's memberships in every account (the account switcher).

    Runs under `user_context`, whose RLS policy shows a user their own memberships only.
    """
    if not user.is_authenticated:
        return []
    with user_context(user):
        # A deleted account's memberships are gone with it; the filter keeps a tombstone out
        # even so.
        return list(
            Membership.all_accounts.filter(user=user, account__deleted_at__isnull=True)
            .select_related("account")
            .order_by("account__name", "pk")
        )


def member_list(*, account: Account) -> QuerySet[Membership]:
    return Membership.objects.for_account(account).select_related("user").order_by("user__email")


def invitation_list(*, account: Account) -> QuerySet[Invitation]:
    """The account's pending invitations (accepted ones are kept as a record, not listed)."""
    return Invitation.objects.for_account(account).filter(accepted_at__isnull=True).order_by("email")


def invitation_list_for_user(*, user: User) -> list[Invitation]:
    """Pending, unexpired invitations to the user's address, in any account, once the address
    is verified (nobody sees invitations to an address they have not proved).

    Runs under `user_context`, whose RLS policy (invitation_invitee_read) shows exactly these.
    """
    if not user.is_authenticated or user.email_verified_at is None:
        return []
    with user_context(user):
        invitations = (
            Invitation.all_accounts.filter(
                email__iexact=user.email,
                accepted_at__isnull=True,
                expires_at__gt=timezone.now(),
                account__deleted_at__isnull=True,
            )
            .select_related("account", "invited_by")
            .order_by("-created_at")
        )
        return list(invitations)


def api_key_list(*, account: Account) -> QuerySet[ApiKey]:
    return ApiKey.objects.for_account(account).select_related("created_by").order_by("-created_at")


def api_key_for_secret(*, raw: str) -> ApiKey | None:
    """The active key for a presented secret, or None (unknown, revoked, or its account deleted)."""
    return secret_authenticate(ApiKey, raw=raw)
