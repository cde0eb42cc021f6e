"""Memberships: who may manage whom, adding, changing roles, removing, ending access."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.models import ROLE_RANK, Account, Invitation, Membership, Role, User
from accounts.permissions import Action, Forbidden, actor_require, principal_may
from accounts.scim.models import ScimIdentity
from accounts.scim.tokens import scim_tokens_past_rights_revoke
from accounts.signals import principal_access_ended
from audit.services import audit_record
from core import sockets
from core.error_codes import CoreErrorCode


def _require_manager(*, account: Account, actor: User, action: Action = Action.MEMBERS_MANAGE) -> Membership:
    """The actor's membership, if their role may do `action` (accounts/permissions.py)."""
    return actor_require(
        account=account, actor=actor, action=action, outsider="Only owners and admins can manage the team."
    )


def roles_grantable(*, actor_membership: Membership) -> list[str]:
    """The roles the actor may give (invitations and role changes), highest first."""
    return [
        r
        for r in Role.values
        if ROLE_RANK[r] <= ROLE_RANK.get(actor_membership.role, -1)
        and (r != Role.OWNER or actor_membership.role == Role.OWNER)
    ]


def member_manageable(*, actor_membership: Membership, membership: Membership) -> bool:
    """Whether the actor may change this member's role or remove them (only owners touch owners)."""
    return membership.role != Role.OWNER or actor_membership.role == Role.OWNER


ROLE_CHOICE_MESSAGE = "Choose a role: owner, admin, member or viewer."


def _check_role(role: str) -> None:
    if role not in Role.values:
        raise AccountError(AccountErrorCode.INVALID_ROLE, ROLE_CHOICE_MESSAGE, field="role")


def _check_grantable(actor_membership: Membership, role: str) -> None:
    """Nobody grants a role above their own; only owners grant (or take away) owner."""
    _check_role(role)
    if role == Role.OWNER and actor_membership.role != Role.OWNER:
        raise Forbidden("Only owners can make someone an owner.")
    if ROLE_RANK[role] > ROLE_RANK.get(actor_membership.role, -1):
        raise Forbidden(f"You cannot grant a role above your own ({actor_membership.role}).")


def _owner_count(account: Account) -> int:
    return Membership.objects.for_account(account).filter(role=Role.OWNER).count()


def _lock_memberships(account: Account) -> None:
    # NOTE: two owners demoting each other at once must not leave the account ownerless:
    # every owner-count check runs with the account's memberships locked.
    list(Membership.objects.for_account(account).select_for_update().values_list("pk", flat=True))


@transaction.atomic
def member_add(*, account: Account, actor: User, user: User, role: str, by_staff: bool = False) -> Membership:
    """Make `user` a member with `role`, at once (the Team page invites instead: the person
    joins when they accept). Owners and admins, within the roles they may grant."""
    if by_staff:
        _check_role(role)
    else:
        _check_grantable(_require_manager(account=account, actor=actor), role)
    if account.deleted_at is not None:
        raise AccountError(
            AccountErrorCode.ACCOUNT_DELETED, "This account was deleted: nobody can join it.", field="account"
        )
    members = Membership.objects.for_account(account)
    if members.filter(user=user).exists():
        raise AccountError(
            AccountErrorCode.ALREADY_MEMBER, f"{user.email} is already a member of this account.", field="user"
        )
    membership = members.create(account=account, user=user, role=role)
    audit_record(account=account, action="member.add", actor=actor, target=user.email, detail={"role": role})
    return membership


@transaction.atomic
def member_change_role(
    *, account: Account, actor: User, membership_id: int, role: str, by_staff: bool = False
) -> Membership:
    """Change a member's role. Owners and admins only; only owners grant or take away owner;
    nobody grants a role above their own (themselves included); the last owner stays one."""
    actor_membership = None
    if by_staff:
        _check_role(role)
    else:
        actor_membership = _require_manager(account=account, actor=actor)
        _check_grantable(actor_membership, role)
    _lock_memberships(account)
    membership = Membership.objects.for_account(account).filter(pk=membership_id).first()
    if membership is None:
        raise AccountError(CoreErrorCode.NOT_FOUND, "That member was not found.", status=404)
    touches_owner = role == Role.OWNER or membership.role == Role.OWNER
    if touches_owner and actor_membership is not None and actor_membership.role != Role.OWNER:
        raise Forbidden("Only owners can grant or take away the owner role.")
    if membership.role == Role.OWNER and role != Role.OWNER and _owner_count(account) == 1:
        raise AccountError(
            AccountErrorCode.LAST_OWNER, "The last owner cannot be demoted. Make someone else an owner first."
        )
    audit_record(
        account=account,
        action="member.role_change",
        actor=actor,
        target=membership.user.email,
        detail={"from": membership.role, "to": role},
    )
    membership.role = role
    membership.save(update_fields=["role"])
    _issued_past_rights_end(account=account, issuer_id=membership.user_id, membership=membership, actor=actor)
    # Their open sockets re-check the new role (and close if it may no longer chat).
    sockets.notify_on_commit(sockets.member_group(account.pk, membership.user_id), sockets.CHANGED)
    return membership


@transaction.atomic
def member_remove(*, account: Account, actor: User, membership_id: int, by_staff: bool = False) -> None:
    """Owners/admins remove members; anyone may remove themselves (leave). The last owner stays."""
    _lock_memberships(account)
    membership = Membership.objects.for_account(account).filter(pk=membership_id).first()
    if membership is None:
        raise AccountError(CoreErrorCode.NOT_FOUND, "That member was not found.", status=404)
    if not by_staff and membership.user_id != actor.pk:
        actor_membership = _require_manager(account=account, actor=actor)
        if membership.role == Role.OWNER and actor_membership.role != Role.OWNER:
            raise Forbidden("Only owners can remove an owner.")
    if membership.role == Role.OWNER and _owner_count(account) == 1:
        # `actor` may be an audit Actor (SCIM provisioning), which is nobody's membership.
        verb = "leave" if membership.user_id == getattr(actor, "pk", None) else "be removed"
        raise AccountError(
            AccountErrorCode.LAST_OWNER, f"The last owner cannot {verb}. Make someone else an owner first."
        )
    membership.delete()
    audit_record(
        account=account,
        action="member.remove",
        actor=actor,
        target=membership.user.email,
        detail={"role": membership.role},
    )
    # The identity provider's reactivation gives back the role they had when they left.
    ScimIdentity.objects.for_account(account).filter(user_id=membership.user_id).update(
        role=membership.role, updated_at=timezone.now()
    )
    _issued_past_rights_end(account=account, issuer_id=membership.user_id, membership=None, actor=actor)
    member_access_end(account_id=account.pk, user_id=membership.user_id)


def member_access_end(*, account_id: int, user_id: int) -> None:
    """What follows a membership's removal, in its transaction (the Team page and the admin):
    the apps above drop the person's grants (restricted collections), and their open sockets
    close (4401) once it commits."""
    principal_access_ended.send(sender=Membership, account_id=account_id, user_id=user_id)
    sockets.notify_on_commit(sockets.member_group(account_id, user_id), sockets.REVOKED)


def _may_invite_as(membership: Membership | None, role: str) -> bool:
    """Whether `membership` may (still) invite someone with `role`: the same rules as when
    the invitation was made (MEMBERS_MANAGE, and no role above one's own)."""
    if membership is None or not principal_may(membership, Action.MEMBERS_MANAGE):
        return False
    return role in roles_grantable(actor_membership=membership)


def _issued_past_rights_end(*, account: Account, issuer_id: int, membership: Membership | None, actor) -> None:
    """What a person issued lasts only as long as their rights to issue it: their pending
    invitations, and their SCIM tokens (owners' only), end with the removal or role change
    that took those rights, in its transaction."""
    _invitations_past_rights_cancel(account=account, inviter_id=issuer_id, membership=membership, actor=actor)
    scim_tokens_past_rights_revoke(account=account, maker_id=issuer_id, membership=membership, actor=actor)


def _invitations_past_rights_cancel(*, account: Account, inviter_id: int, membership: Membership | None, actor) -> None:
    """Cancel the pending invitations `inviter_id` issued that their `membership` (None:
    removed) may no longer give: a removed or demoted admin's invitations do not let the
    people they chose in with the rights they had (in the removal's or change's transaction)."""
    pending = Invitation.objects.for_account(account).filter(invited_by_id=inviter_id, accepted_at__isnull=True)
    for invitation in pending.select_for_update():
        if not _may_invite_as(membership, invitation.role):
            invitation.delete()
            audit_record(
                account=account,
                action="invitation.cancel",
                actor=actor,
                target=invitation.email,
                detail={"role": invitation.role, "reason": "the inviter's rights ended"},
            )
