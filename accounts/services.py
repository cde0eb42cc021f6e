"""Writes for users, accounts, memberships, invitations and API keys."""
from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from django.conf import settings

from accounts.errors import AccountError
from accounts.models import Account, ApiKey, Invitation, Membership, Role, User
from accounts.signals import account_created
from core.tenancy import account_context, dangerously_bypass_tenancy

API_KEY_PREFIX = "gw_"


def _clean_email(email: str) -> str:
    email = (email or "").strip().lower()
    try:
        validate_email(email)
    except ValidationError:
        raise AccountError("invalid_email", "Enter a valid email address.", field="email")
    return email


def _unique_slug(name: str) -> str:
    base = slugify(name)[:50] or "team"
    slug, n = base, 1
    while Account.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


@transaction.atomic
def account_create(*, name: str, owner: User, slug: str | None = None, initial_credits: int | None = None) -> Account:
    """A new account with `owner` as its first owner and its starting credits
    (SIGNUP_CREDITS unless `initial_credits` says otherwise). A given slug must be free."""
    name = (name or "").strip()
    if not name:
        raise AccountError("invalid_name", "Give the account a name.", field="name")
    if slug is not None:
        slug = slugify(slug)
        if not slug:
            raise AccountError("invalid_slug", "The slug may use letters, digits and hyphens only.", field="slug")
        if Account.objects.filter(slug=slug).exists():
            raise AccountError("duplicate_slug", f"The slug “{slug}” is taken; choose another.", field="slug")
    account = Account.objects.create(name=name, slug=slug or _unique_slug(name))
    credits = settings.SIGNUP_CREDITS if initial_credits is None else initial_credits
    if credits < 0:
        raise AccountError("invalid_amount", "Starting credits must be zero or more.")
    with account_context(account):
        Membership.objects.for_account(account).create(account=account, user=owner, role=Role.OWNER)
        account_created.send(sender=Account, account=account, initial_credits=credits)
    return account


@transaction.atomic
def user_create(*, email: str, password: str, full_name: str = "") -> User:
    email = _clean_email(email)
    if User.objects.filter(email__iexact=email).exists():
        raise AccountError("duplicate_email", "An account with this email already exists. Log in instead.", field="email")
    try:
        validate_password(password, User(email=email, full_name=full_name))
    except ValidationError as exc:
        raise AccountError("weak_password", " ".join(exc.messages), field="password")
    try:
        return User.objects.create_user(email=email, password=password, full_name=full_name.strip())
    except IntegrityError:
        raise AccountError("duplicate_email", "An account with this email already exists. Log in instead.", field="email")


@transaction.atomic
def signup(*, email: str, password: str, account_name: str, full_name: str = "") -> tuple[User, Account]:
    """Sign-up: the user, their own account as owner, and any pending invitations accepted."""
    user = user_create(email=email, password=password, full_name=full_name)
    account = account_create(name=account_name or f"{user.get_short_name()}'s team", owner=user)
    invitations_accept(user=user)
    return user, account


def invitations_accept(*, user: User) -> list[Membership]:
    """Turn every pending invitation for the user's email into a membership.

    Invitations live in many accounts; finding them is a cross-account system job.
    """
    memberships = []
    with dangerously_bypass_tenancy(reason=f"accept invitations for new user {user.pk}"):
        for invitation in Invitation.all_accounts.filter(email__iexact=user.email).select_related("account"):
            membership, _ = Membership.all_accounts.get_or_create(
                account=invitation.account, user=user, defaults={"role": invitation.role})
            invitation.delete()
            memberships.append(membership)
    return memberships


def _require_manager(*, account: Account, actor: User) -> Membership:
    membership = Membership.objects.for_account(account).filter(user=actor).first()
    if membership is None or not membership.can_manage_team:
        raise AccountError("permission_denied", "Only owners and admins can manage the team.", status=403)
    return membership


@transaction.atomic
def member_invite(*, account: Account, actor: User, email: str, role: str = Role.MEMBER):
    """Add an existing user at once, or leave a pending invitation for sign-up to accept.

    Returns the Membership or the Invitation.
    """
    actor_membership = _require_manager(account=account, actor=actor)
    email = _clean_email(email)
    if role not in Role.values:
        raise AccountError("invalid_role", "Choose a role: owner, admin or member.", field="role")
    if role == Role.OWNER and actor_membership.role != Role.OWNER:
        raise AccountError("permission_denied", "Only owners can make someone an owner.", status=403)
    existing_user = User.objects.filter(email__iexact=email).first()
    memberships = Membership.objects.for_account(account)
    if existing_user and memberships.filter(user=existing_user).exists():
        raise AccountError("already_member", f"{email} is already a member of this account.", field="email")
    if existing_user:
        return memberships.create(account=account, user=existing_user, role=role)
    invitations = Invitation.objects.for_account(account)
    if invitations.filter(email__iexact=email).exists():
        raise AccountError("already_invited", f"{email} has already been invited.", field="email")
    return invitations.create(account=account, email=email, role=role, invited_by=actor)


def invitation_cancel(*, account: Account, actor: User, invitation_id: int) -> None:
    _require_manager(account=account, actor=actor)
    Invitation.objects.for_account(account).filter(pk=invitation_id).delete()


def _owner_count(account: Account) -> int:
    return Membership.objects.for_account(account).filter(role=Role.OWNER).count()


def _lock_memberships(account: Account) -> None:
    # NOTE: two owners demoting each other at once must not leave the account ownerless:
    # every owner-count check runs with the account's memberships locked.
    list(Membership.objects.for_account(account).select_for_update().values_list("pk", flat=True))


@transaction.atomic
def member_change_role(*, account: Account, actor: User, membership_id: int, role: str) -> Membership:
    actor_membership = _require_manager(account=account, actor=actor)
    if role not in Role.values:
        raise AccountError("invalid_role", "Choose a role: owner, admin or member.", field="role")
    _lock_memberships(account)
    membership = Membership.objects.for_account(account).filter(pk=membership_id).first()
    if membership is None:
        raise AccountError("not_found", "That member was not found.", status=404)
    touches_owner = role == Role.OWNER or membership.role == Role.OWNER
    if touches_owner and actor_membership.role != Role.OWNER:
        raise AccountError("permission_denied", "Only owners can grant or take away the owner role.", status=403)
    if membership.role == Role.OWNER and role != Role.OWNER and _owner_count(account) == 1:
        raise AccountError("last_owner", "The last owner cannot be demoted. Make someone else an owner first.")
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def member_remove(*, account: Account, actor: User, membership_id: int) -> None:
    """Owners/admins remove members; anyone may remove themselves (leave)."""
    _lock_memberships(account)
    membership = Membership.objects.for_account(account).filter(pk=membership_id).first()
    if membership is None:
        raise AccountError("not_found", "That member was not found.", status=404)
    if membership.user_id != actor.pk:
        actor_membership = _require_manager(account=account, actor=actor)
        if membership.role == Role.OWNER and actor_membership.role != Role.OWNER:
            raise AccountError("permission_denied", "Only owners can remove an owner.", status=403)
    if membership.role == Role.OWNER and _owner_count(account) == 1:
        raise AccountError("last_owner", "The last owner cannot leave. Make someone else an owner first.")
    membership.delete()


def _hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@transaction.atomic
def api_key_create(*, account: Account, actor: User | None, name: str) -> tuple[ApiKey, str]:
    """A new key. Returns (key, raw secret); the secret is never stored or shown again."""
    if actor is not None:
        _require_manager(account=account, actor=actor)
    name = (name or "").strip()
    if not name:
        raise AccountError("invalid_name", "Give the key a name, e.g. the integration that will use it.", field="name")
    raw = API_KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.for_account(account).create(
        account=account, name=name[:100], prefix=raw[:10], key_hash=_hash_key(raw), created_by=actor)
    return key, raw


def api_key_revoke(*, account: Account, actor: User | None, key_id: int) -> ApiKey:
    if actor is not None:
        _require_manager(account=account, actor=actor)
    key = ApiKey.objects.for_account(account).filter(pk=key_id).first()
    if key is None:
        raise AccountError("not_found", "That API key was not found.", status=404)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


def api_key_touch(*, key: ApiKey) -> None:
    """Record use, at most once a minute per key so busy integrations don't write per call."""
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.for_account(key.account_id).filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
