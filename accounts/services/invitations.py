"""Invitations: sending (with rate limits), finding by token, accepting, declining, cancelling."""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from accounts import ratelimit
from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.keys import hash_key
from accounts.models import Account, Invitation, Membership, Role, User
from accounts.selectors import invitation_list_for_user
from accounts.services.members import _check_grantable, _may_invite_as, _require_manager
from accounts.services.signup import _clean_email, user_create, user_last_account_set
from accounts.services.verification import _email_mark_verified, _send_mail
from audit.services import audit_record
from core.error_codes import CoreErrorCode
from core.tenancy import account_context

INVITATION_SALT = "accounts.invitation"


@transaction.atomic
def member_invite(
    *, account: Account, actor: User, email: str, role: str = Role.MEMBER, site_url: str = "http://localhost"
) -> Invitation:
    """Invite an address, existing user or not: an invitation and an email with its link.

    Nobody is added here. The person joins when they accept: through the link (which
    proves the address), or from their overview once their address is verified.
    """
    actor_membership = _require_manager(account=account, actor=actor)
    email = _clean_email(email)
    _check_grantable(actor_membership, role)
    return invitation_send(account=account, inviter=actor, email=email, role=role, site_url=site_url)


@transaction.atomic
def invitation_send(
    *, account: Account, inviter: User, email: str, role: str, site_url: str, audit_actor=None
) -> Invitation:
    """The invitation itself, for an inviter whose right to give `role` the caller checked
    (the Team page's form; a SCIM token, whose maker is the inviter): refused for a member or
    an address already invited, limited per inviter and per address, emailed once this
    commits. The audit entry names `audit_actor` (default: the inviter)."""
    if Membership.objects.for_account(account).filter(user__email__iexact=email).exists():
        raise AccountError(
            AccountErrorCode.ALREADY_MEMBER, f"{email} is already a member of this account.", field="email"
        )
    invitations = Invitation.objects.for_account(account)
    if invitations.filter(email__iexact=email, accepted_at__isnull=True).exists():
        raise AccountError(AccountErrorCode.ALREADY_INVITED, f"{email} has already been invited.", field="email")
    limits = ratelimit.invitation_limits(inviter, email)
    wait = ratelimit.wait_for(limits)
    if wait:
        raise AccountError(
            CoreErrorCode.RATE_LIMITED,
            f"Too many invitations were sent to {email} or by you: {ratelimit.try_again_in(wait)}.",
            status=429,
            field="email",
        )
    for limit in limits:
        limit.hit()
    secret = secrets.token_urlsafe(32)
    invitation = invitations.create(
        account=account,
        email=email,
        role=role,
        invited_by=inviter,
        token_hash=hash_key(secret),
        expires_at=timezone.now() + timedelta(days=settings.INVITATION_MAX_AGE_DAYS),
    )
    token = signing.dumps({"a": account.pk, "i": invitation.pk, "n": secret}, salt=INVITATION_SALT)
    _send_mail(
        to=email,
        template="accounts/email/invitation.txt",
        context={
            "invitation": invitation,
            "account": account,
            "actor": inviter,
            "days": settings.INVITATION_MAX_AGE_DAYS,
            "link": site_url.rstrip("/") + reverse("accounts:invitation", args=[token]),
        },
    )
    audit_record(
        account=account, action="invitation.create", actor=audit_actor or inviter, target=email, detail={"role": role}
    )
    return invitation


def invitation_for_token(*, token: str) -> Invitation:
    """The pending invitation a link names, or an AccountError a person can read:
    "invitation_invalid" (404: forged, cancelled, replaced), "invitation_used" and
    "invitation_expired" (410)."""
    invalid = AccountError(
        AccountErrorCode.INVITATION_INVALID,
        "This invitation link is not valid. It may have been cancelled or "
        "copied incompletely; ask the team for a new one.",
        status=404,
    )
    try:
        data = signing.loads(token, salt=INVITATION_SALT)
        account_id, invitation_id, secret = int(data["a"]), int(data["i"]), str(data["n"])
    except (signing.BadSignature, KeyError, TypeError, ValueError) as exc:
        raise invalid from exc
    # The signed token names the account, so the invitation is read in that account's
    # context: no cross-account bypass.
    with account_context(account_id=account_id):
        invitation = (
            Invitation.objects.for_account(account_id)
            .select_related("account", "invited_by")
            .filter(pk=invitation_id)
            .first()
        )
    if (
        invitation is None
        or not secrets.compare_digest(invitation.token_hash, hash_key(secret))
        or invitation.account.deleted_at is not None
    ):
        raise invalid
    if invitation.accepted_at is not None:
        raise AccountError(AccountErrorCode.INVITATION_USED, "This invitation has already been used.", status=410)
    if invitation.is_expired:
        raise AccountError(
            AccountErrorCode.INVITATION_EXPIRED,
            f"This invitation expired on {invitation.expires_at:%Y-%m-%d}. Ask the team to invite you again.",
            status=410,
        )
    return invitation


def _invitation_check_invitee(invitation: Invitation, user: User) -> None:
    if user.email.lower() != invitation.email.lower():
        raise AccountError(
            AccountErrorCode.WRONG_USER,
            f"This invitation is for {invitation.email}, and you are logged in as "
            f"{user.email}. Log out, then log in or sign up as {invitation.email} to accept it.",
            status=403,
        )


@transaction.atomic
def invitation_accept(*, invitation: Invitation, user: User, via_link: bool) -> Membership:
    """Join the invitation's account, once. The caller proved the address: `via_link` (the
    emailed link, which also verifies the user's address) or a verified address."""
    _invitation_check_invitee(invitation, user)
    if not via_link and user.email_verified_at is None:
        raise AccountError(CoreErrorCode.NOT_FOUND, "That invitation was not found.", status=404)
    with account_context(account_id=invitation.account_id, user=user):
        # NOTE: the row lock makes a double click (or two tabs) accept once.
        invitation = (
            Invitation.objects.for_account(invitation.account_id)
            .select_for_update()
            .filter(pk=invitation.pk, accepted_at__isnull=True)
            .first()
        )
        if invitation is None:
            raise AccountError(AccountErrorCode.INVITATION_USED, "This invitation has already been used.", status=410)
        if invitation.is_expired:
            raise AccountError(
                AccountErrorCode.INVITATION_EXPIRED,
                "This invitation has expired. Ask the team to invite you again.",
                status=410,
            )
        if invitation.invited_by_id is not None:
            inviter = (
                Membership.objects.for_account(invitation.account_id).filter(user_id=invitation.invited_by_id).first()
            )
            if not _may_invite_as(inviter, invitation.role):
                raise AccountError(
                    AccountErrorCode.INVITATION_INVALID,
                    "This invitation is no longer valid: the person who sent it "
                    "can no longer invite with this role. Ask the team for a new one.",
                    status=410,
                )
        membership, _ = Membership.objects.for_account(invitation.account_id).get_or_create(
            account_id=invitation.account_id, user=user, defaults={"role": invitation.role}
        )
        invitation.accepted_at, invitation.accepted_by = timezone.now(), user
        invitation.save(update_fields=["accepted_at", "accepted_by"])
        audit_record(
            account=invitation.account_id,
            action="invitation.accept",
            actor=user,
            target=user.email,
            detail={"role": membership.role},
        )
    if via_link:
        _email_mark_verified(user)
    user_last_account_set(user=user, account_id=invitation.account_id)
    return membership


@transaction.atomic
def invitation_signup(*, invitation: Invitation, password: str, full_name: str = "") -> tuple[User, Membership]:
    """Sign-up from an invitation's link: a user for the invited address and their
    membership of the inviting account, and nothing else (no team of their own: they came to
    join one). The link proves the address, so it is verified and the invitation accepted,
    as the link's Accept button does. An address that already has a user: DUPLICATE_EMAIL
    (they log in and accept instead); a weak password: nothing is made."""
    user = user_create(email=invitation.email, password=password, full_name=full_name)
    return user, invitation_accept(invitation=invitation, user=user, via_link=True)


def _invitation_for_invitee(*, user: User, invitation_id: int) -> Invitation:
    invitation = next((i for i in invitation_list_for_user(user=user) if i.pk == invitation_id), None)
    if invitation is None:
        raise AccountError(CoreErrorCode.NOT_FOUND, "That invitation was not found.", status=404)
    return invitation


def invitation_accept_by_id(*, user: User, invitation_id: int) -> Membership:
    """Accept from the overview: only an invitation to the user's own, verified address."""
    return invitation_accept(
        invitation=_invitation_for_invitee(user=user, invitation_id=invitation_id), user=user, via_link=False
    )


@transaction.atomic
def invitation_decline(*, user: User, invitation: Invitation | None = None, invitation_id: int | None = None) -> None:
    """The invitee says no: the invitation is gone (the team may invite again)."""
    if invitation is None:
        invitation = _invitation_for_invitee(user=user, invitation_id=invitation_id)
    _invitation_check_invitee(invitation, user)
    with account_context(account_id=invitation.account_id):
        Invitation.objects.for_account(invitation.account_id).filter(
            pk=invitation.pk, accepted_at__isnull=True
        ).delete()


def invitation_cancel(*, account: Account, actor: User, invitation_id: int) -> None:
    _require_manager(account=account, actor=actor)
    if Invitation.objects.for_account(account).filter(pk=invitation_id, accepted_at__isnull=True).delete()[0]:
        audit_record(account=account, action="invitation.cancel", actor=actor, target=f"invitation {invitation_id}")
