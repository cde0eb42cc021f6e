"""SCIM's reads: the token a provider presents, and the account's identities."""

from __future__ import annotations

import uuid

from django.db.models import Exists, OuterRef, QuerySet, Subquery

from accounts.models import Account, Membership
from accounts.scim.errors import ScimError
from accounts.scim.models import ScimIdentity, ScimToken
from accounts.tokens import secret_authenticate


def scim_token_for_secret(*, raw: str) -> ScimToken | None:
    """The active token for a presented secret, or None (unknown, revoked, or its account
    deleted); row-level security shows only the row whose hash is computed (the policy
    scimtoken_by_hash)."""
    return secret_authenticate(ScimToken, raw=raw)


def scim_token_list(*, account: Account) -> QuerySet[ScimToken]:
    """The account's tokens not revoked, newest first, each with its maker."""
    return (
        ScimToken.objects.for_account(account)
        .filter(revoked_at__isnull=True)
        .select_related("created_by")
        .order_by("-created_at")
    )


def scim_identity_list(
    *, account: Account, user_name: str | None = None, external_id: str | None = None
) -> QuerySet[ScimIdentity]:
    """The account's identities, oldest first, each with `is_member` (SCIM's `active`) and
    `member_role` (None when not a member)."""
    memberships = Membership.objects.for_account(account).filter(user_id=OuterRef("user_id"))
    identities = (
        ScimIdentity.objects.for_account(account)
        .select_related("user")
        .annotate(is_member=Exists(memberships), member_role=Subquery(memberships.values("role")[:1]))
        .order_by("created_at", "pk")
    )
    if user_name is not None:
        identities = identities.filter(user__email__iexact=user_name)
    if external_id is not None:
        identities = identities.filter(external_id=external_id)
    return identities


def scim_identity_list_in_role(*, account: Account, role: str) -> QuerySet[ScimIdentity]:
    """The identities of the account's current members with `role` (a group's members)."""
    return scim_identity_list(account=account).filter(member_role=role)


def scim_identity_access_by_id(*, account: Account, scim_id: str) -> ScimIdentity:
    """The account's identity with this SCIM id, or 404 (not ours and unknown look alike)."""
    try:
        key = uuid.UUID(str(scim_id))
    except ValueError:
        key = None
    identity = scim_identity_list(account=account).filter(scim_id=key).first() if key else None
    if identity is None:
        raise ScimError(404, f"No user with id {scim_id!r} in this account.")
    return identity
