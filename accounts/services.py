"""Writes for users, accounts, memberships, invitations and API keys."""
from __future__ import annotations

import secrets
from datetime import timedelta

from django.contrib.auth.password_validation import validate_password
from django.core import signing
from django.core.mail import send_mail
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.text import slugify

from django.conf import settings

from accounts import ratelimit
from accounts.errors import AccountError
from accounts.keys import API_KEY_PREFIX, hash_key
from accounts.models import ROLE_RANK, Account, ApiKey, Invitation, KeyScope, Membership, Role, User
from accounts.permissions import Action, Forbidden, principal_may, principal_require
from accounts.selectors import invitation_list_for_user
from accounts.signals import account_created, account_deleted, principal_access_ended, signup_email_verified
from audit.services import audit_record
from core import sockets
from core.tenancy import account_context
from core.text import CONTROL_CHARACTERS_MESSAGE, has_control_characters
from accounts.error_codes import AccountErrorCode
from core.error_codes import CoreErrorCode



def _clean_email(email: str) -> str:
    email = (email or "").strip().lower()
    try:
        validate_email(email)
    except ValidationError:
        raise AccountError(CoreErrorCode.INVALID_EMAIL, "Enter a valid email address.", field="email")
    return email


def _unique_slug(name: str) -> str:
    base = slugify(name)[:50] or "team"
    slug, n = base, 1
    while Account.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


@transaction.atomic
def account_create(*, name: str, owner: User, slug: str | None = None, initial_credits: int | None = None,
                   created_by: User | None = None) -> Account:
    """A new account with `owner` as its first owner and its starting credits
    (SIGNUP_CREDITS unless `initial_credits` says otherwise). A given slug must be free.
    Operators' path (create_account, the demo); a person's own teams go through team_create."""
    name = (name or "").strip()
    if not name:
        raise AccountError(CoreErrorCode.INVALID_NAME, "Give the account a name.", field="name")
    if has_control_characters(name):
        raise AccountError(CoreErrorCode.INVALID_NAME, CONTROL_CHARACTERS_MESSAGE, field="name")
    if slug is not None:
        slug = slugify(slug)
        if not slug:
            raise AccountError(AccountErrorCode.INVALID_SLUG, "The slug may use letters, digits and hyphens only.", field="slug")
        if Account.objects.filter(slug=slug).exists():
            raise AccountError(AccountErrorCode.DUPLICATE_SLUG, f"The slug “{slug}” is taken; choose another.", field="slug")
    account = Account.objects.create(name=name, slug=slug or _unique_slug(name), created_by=created_by)
    credits = settings.SIGNUP_CREDITS if initial_credits is None else initial_credits
    if credits < 0:
        raise AccountError(CoreErrorCode.INVALID_AMOUNT, "Starting credits must be zero or more.")
    with account_context(account):
        Membership.objects.for_account(account).create(account=account, user=owner, role=Role.OWNER)
        account_created.send(sender=Account, account=account, initial_credits=credits)
    return account


@transaction.atomic
def team_create(*, name: str, owner: User) -> Account:
    """A team a person creates for themselves (the "New team" form, and their sign-up team).

    Starting credits are one grant per verified person: this team gets SIGNUP_CREDITS only if
    the person's address is verified and they never had the grant (the grant of an unverified
    person's sign-up team waits for the verification). A person creates at most
    TEAMS_PER_PERSON_PER_DAY teams in 24 hours: past it, AccountError(AccountErrorCode.TOO_MANY_TEAMS, 429).
    NOTE: two creations at once are serialised on the person's row, so they share one grant
    and one count.
    """
    person = User.objects.select_for_update().get(pk=owner.pk)
    since = timezone.now() - timedelta(days=1)
    limit = settings.TEAMS_PER_PERSON_PER_DAY
    if Account.objects.filter(created_by=person, created_at__gte=since).count() >= limit:
        raise AccountError(AccountErrorCode.TOO_MANY_TEAMS, f"A person can create at most {limit} teams a day. Try again "
                           "tomorrow, or ask to be invited to an existing team.", status=429)
    grant = person.email_verified_at is not None and person.starting_credits_granted_at is None
    account = account_create(name=name, owner=person, initial_credits=settings.SIGNUP_CREDITS if grant else 0,
                             created_by=person)
    if grant:
        person.starting_credits_granted_at = timezone.now()
        person.save(update_fields=["starting_credits_granted_at"])
    return account


def starting_credits_went_to(*, user: User) -> Account | None:
    """The team this person's starting credits went to, if any (what a new team's page says)."""
    if user.starting_credits_granted_at is None:
        return None
    return (user.signup_account if user.signup_account_id else
            Account.objects.filter(created_by=user).order_by("created_at").first())


@transaction.atomic
def user_create(*, email: str, password: str, full_name: str = "") -> User:
    email = _clean_email(email)
    if has_control_characters(full_name):
        raise AccountError(CoreErrorCode.INVALID_NAME, CONTROL_CHARACTERS_MESSAGE, field="full_name")
    if User.objects.filter(email__iexact=email).exists():
        raise AccountError(AccountErrorCode.DUPLICATE_EMAIL, "An account with this email already exists. Log in instead.", field="email")
    try:
        validate_password(password, User(email=email, full_name=full_name))
    except ValidationError as exc:
        raise AccountError(AccountErrorCode.WEAK_PASSWORD, " ".join(exc.messages), field="password")
    try:
        return User.objects.create_user(email=email, password=password, full_name=full_name.strip())
    except IntegrityError:
        raise AccountError(AccountErrorCode.DUPLICATE_EMAIL, "An account with this email already exists. Log in instead.", field="email")


@transaction.atomic
def signup(*, email: str, password: str, account_name: str, full_name: str = "",
           email_verified: bool = False, site_url: str = "") -> tuple[User, Account]:
    """Sign-up: the user and their own account, as its owner.

    Nothing else: an invitation to the same address is not accepted here (signing up does
    not prove the address), and the starting credits wait until the address is verified
    (the link emailed to it, or an invitation link). `email_verified` is for operators
    (the demo account), who vouch for the address themselves.
    """
    user = user_create(email=email, password=password, full_name=full_name)
    account = account_create(name=account_name or f"{user.get_short_name()}'s team", owner=user, initial_credits=0,
                             created_by=user)
    user.signup_account = account
    user.last_account = account
    user.save(update_fields=["signup_account", "last_account"])
    if email_verified:
        _email_mark_verified(user)
    elif site_url:
        email_verification_send(user=user, site_url=site_url)
    return user, account


# --- proving an email address --------------------------------------------------------------

VERIFY_SALT = "accounts.verify-email"
INVITATION_SALT = "accounts.invitation"


def _send_mail(*, to: str, template: str, context: dict) -> None:
    """Sent once the transaction commits (never for a rolled-back invitation or sign-up)."""
    subject, _, body = render_to_string(template, context).partition("\n")
    transaction.on_commit(lambda: send_mail(subject.strip(), body.lstrip(), None, [to]))


def email_verification_token(*, user: User) -> str:
    # The address is in the token: a link for an old address does not verify a new one.
    return signing.dumps({"u": user.pk, "e": user.email.lower()}, salt=VERIFY_SALT)


def email_verification_send(*, user: User, site_url: str) -> None:
    """Email the user a link that verifies their address (EMAIL_VERIFICATION_MAX_AGE_DAYS)."""
    link = site_url.rstrip("/") + reverse("accounts:verify-email", args=[email_verification_token(user=user)])
    _send_mail(to=user.email, template="accounts/email/verify_email.txt", context={
        "user": user, "link": link, "days": settings.EMAIL_VERIFICATION_MAX_AGE_DAYS,
        "credits": settings.SIGNUP_CREDITS})


def _email_mark_verified(user: User) -> bool:
    """Mark the address verified; the first time, pay the sign-up team its starting credits.

    Returns whether this call verified it. NOTE: two clicks at once are serialised on the
    user row, and the grant's idempotency key ("signup" per account) pays once regardless.
    """
    user = User.objects.select_for_update().get(pk=user.pk)
    if user.email_verified_at is not None:
        return False
    user.email_verified_at = timezone.now()
    fields = ["email_verified_at"]
    # One grant per person: none if a team they created since got it (it cannot have: an
    # unverified person's teams start empty) or if the sign-up team is gone.
    if user.signup_account_id and user.starting_credits_granted_at is None \
            and not Account.objects.filter(pk=user.signup_account_id, deleted_at__isnull=False).exists():
        user.starting_credits_granted_at = user.email_verified_at
        fields.append("starting_credits_granted_at")
        with account_context(account_id=user.signup_account_id):
            signup_email_verified.send(sender=User, account=user.signup_account,
                                       initial_credits=settings.SIGNUP_CREDITS)
    user.save(update_fields=fields)
    return True


@transaction.atomic
def email_verify(*, token: str) -> tuple[User, bool]:
    """Verify the address a token was made for. Returns (user, verified now?).

    Refuses a forged token ("link_invalid", 404), an old one ("link_expired", 410) and one
    for an address the user no longer has. A second use changes nothing.
    """
    try:
        data = signing.loads(token, salt=VERIFY_SALT, max_age=timedelta(days=settings.EMAIL_VERIFICATION_MAX_AGE_DAYS))
    except signing.SignatureExpired:
        raise AccountError(AccountErrorCode.LINK_EXPIRED, "This verification link has expired. Log in and ask for a new one.",
                           status=410)
    except signing.BadSignature:
        raise AccountError(AccountErrorCode.LINK_INVALID, "This verification link is not valid. Copy the whole link from the "
                           "email, or log in and ask for a new one.", status=404)
    user = User.objects.filter(pk=data.get("u"), email__iexact=data.get("e", "")).first()
    if user is None:
        raise AccountError(AccountErrorCode.LINK_INVALID, "This verification link is not valid: it was made for another address.",
                           status=404)
    return user, _email_mark_verified(user)


def user_last_account_set(*, user: User, account_id: int) -> None:
    """Remember the account the person works in: the next login lands there."""
    if user.last_account_id != account_id:
        User.objects.filter(pk=user.pk).update(last_account_id=account_id)
        user.last_account_id = account_id


def _require_manager(*, account: Account, actor: User, action: Action = Action.MEMBERS_MANAGE) -> Membership:
    """The actor's membership, if their role may do `action` (accounts/permissions.py)."""
    membership = Membership.objects.for_account(account).filter(user=actor).first()
    if membership is None:
        raise Forbidden("Only owners and admins can manage the team.")
    principal_require(membership, action)
    return membership


def roles_grantable(*, actor_membership: Membership) -> list[str]:
    """The roles the actor may give (invitations and role changes), highest first."""
    return [r for r in Role.values if ROLE_RANK[r] <= ROLE_RANK.get(actor_membership.role, -1)
            and (r != Role.OWNER or actor_membership.role == Role.OWNER)]


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


def _may_invite_as(membership: Membership | None, role: str) -> bool:
    """Whether `membership` may (still) invite someone with `role`: the same rules as when
    the invitation was made (MEMBERS_MANAGE, and no role above one's own)."""
    if membership is None or not principal_may(membership, Action.MEMBERS_MANAGE):
        return False
    return role in roles_grantable(actor_membership=membership)


def _invitations_past_rights_cancel(*, account: Account, inviter_id: int, membership: Membership | None,
                                    actor) -> None:
    """Cancel the pending invitations `inviter_id` issued that their `membership` (None:
    removed) may no longer give: a removed or demoted admin's invitations do not let the
    people they chose in with the rights they had (in the removal's or change's transaction)."""
    pending = Invitation.objects.for_account(account).filter(invited_by_id=inviter_id, accepted_at__isnull=True)
    for invitation in pending.select_for_update():
        if not _may_invite_as(membership, invitation.role):
            invitation.delete()
            audit_record(account=account, action="invitation.cancel", actor=actor, target=invitation.email,
                         detail={"role": invitation.role, "reason": "the inviter's rights ended"})


@transaction.atomic
def member_invite(*, account: Account, actor: User, email: str, role: str = Role.MEMBER,
                  site_url: str = "http://localhost") -> Invitation:
    """Invite an address, existing user or not: an invitation and an email with its link.

    Nobody is added here. The person joins when they accept: through the link (which
    proves the address), or from their overview once their address is verified.
    """
    actor_membership = _require_manager(account=account, actor=actor)
    email = _clean_email(email)
    _check_grantable(actor_membership, role)
    if Membership.objects.for_account(account).filter(user__email__iexact=email).exists():
        raise AccountError(AccountErrorCode.ALREADY_MEMBER, f"{email} is already a member of this account.", field="email")
    invitations = Invitation.objects.for_account(account)
    if invitations.filter(email__iexact=email, accepted_at__isnull=True).exists():
        raise AccountError(AccountErrorCode.ALREADY_INVITED, f"{email} has already been invited.", field="email")
    limits = ratelimit.invitation_limits(actor, email)
    wait = ratelimit.wait_for(limits)
    if wait:
        raise AccountError(CoreErrorCode.RATE_LIMITED, f"Too many invitations were sent to {email} or by you: "
                           f"{ratelimit.try_again_in(wait)}.", status=429, field="email")
    for limit in limits:
        limit.hit()
    secret = secrets.token_urlsafe(32)
    invitation = invitations.create(
        account=account, email=email, role=role, invited_by=actor, token_hash=hash_key(secret),
        expires_at=timezone.now() + timedelta(days=settings.INVITATION_MAX_AGE_DAYS))
    token = signing.dumps({"a": account.pk, "i": invitation.pk, "n": secret}, salt=INVITATION_SALT)
    _send_mail(to=email, template="accounts/email/invitation.txt", context={
        "invitation": invitation, "account": account, "actor": actor, "days": settings.INVITATION_MAX_AGE_DAYS,
        "link": site_url.rstrip("/") + reverse("accounts:invitation", args=[token])})
    audit_record(account=account, action="invitation.create", actor=actor, target=email, detail={"role": role})
    return invitation


def invitation_for_token(*, token: str) -> Invitation:
    """The pending invitation a link names, or an AccountError a person can read:
    "invitation_invalid" (404: forged, cancelled, replaced), "invitation_used" and
    "invitation_expired" (410)."""
    invalid = AccountError(AccountErrorCode.INVITATION_INVALID, "This invitation link is not valid. It may have been cancelled or "
                           "copied incompletely; ask the team for a new one.", status=404)
    try:
        data = signing.loads(token, salt=INVITATION_SALT)
        account_id, invitation_id, secret = int(data["a"]), int(data["i"]), str(data["n"])
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise invalid
    # The signed token names the account, so the invitation is read in that account's
    # context: no cross-account bypass.
    with account_context(account_id=account_id):
        invitation = (Invitation.objects.for_account(account_id).select_related("account", "invited_by")
                      .filter(pk=invitation_id).first())
    if invitation is None or not secrets.compare_digest(invitation.token_hash, hash_key(secret)) \
            or invitation.account.deleted_at is not None:
        raise invalid
    if invitation.accepted_at is not None:
        raise AccountError(AccountErrorCode.INVITATION_USED, "This invitation has already been used.", status=410)
    if invitation.is_expired:
        raise AccountError(AccountErrorCode.INVITATION_EXPIRED, f"This invitation expired on {invitation.expires_at:%Y-%m-%d}. "
                           "Ask the team to invite you again.", status=410)
    return invitation


def _invitation_check_invitee(invitation: Invitation, user: User) -> None:
    if user.email.lower() != invitation.email.lower():
        raise AccountError(AccountErrorCode.WRONG_USER, f"This invitation is for {invitation.email}, and you are logged in as "
                           f"{user.email}. Log out, then log in or sign up as {invitation.email} to accept it.",
                           status=403)


@transaction.atomic
def invitation_accept(*, invitation: Invitation, user: User, via_link: bool) -> Membership:
    """Join the invitation's account, once. The caller proved the address: `via_link` (the
    emailed link, which also verifies the user's address) or a verified address."""
    _invitation_check_invitee(invitation, user)
    if not via_link and user.email_verified_at is None:
        raise AccountError(CoreErrorCode.NOT_FOUND, "That invitation was not found.", status=404)
    with account_context(account_id=invitation.account_id, user=user):
        # NOTE: the row lock makes a double click (or two tabs) accept once.
        invitation = (Invitation.objects.for_account(invitation.account_id).select_for_update()
                      .filter(pk=invitation.pk, accepted_at__isnull=True).first())
        if invitation is None:
            raise AccountError(AccountErrorCode.INVITATION_USED, "This invitation has already been used.", status=410)
        if invitation.is_expired:
            raise AccountError(AccountErrorCode.INVITATION_EXPIRED, "This invitation has expired. Ask the team to invite you again.",
                               status=410)
        if invitation.invited_by_id is not None:
            inviter = Membership.objects.for_account(invitation.account_id).filter(
                user_id=invitation.invited_by_id).first()
            if not _may_invite_as(inviter, invitation.role):
                raise AccountError(AccountErrorCode.INVITATION_INVALID, "This invitation is no longer valid: the person who sent it "
                                   "can no longer invite with this role. Ask the team for a new one.", status=410)
        membership, _ = Membership.objects.for_account(invitation.account_id).get_or_create(
            account_id=invitation.account_id, user=user, defaults={"role": invitation.role})
        invitation.accepted_at, invitation.accepted_by = timezone.now(), user
        invitation.save(update_fields=["accepted_at", "accepted_by"])
        audit_record(account=invitation.account_id, action="invitation.accept", actor=user, target=user.email, detail={"role": membership.role})
    if via_link:
        _email_mark_verified(user)
    user_last_account_set(user=user, account_id=invitation.account_id)
    return membership


def _invitation_for_invitee(*, user: User, invitation_id: int) -> Invitation:
    invitation = next((i for i in invitation_list_for_user(user=user) if i.pk == invitation_id), None)
    if invitation is None:
        raise AccountError(CoreErrorCode.NOT_FOUND, "That invitation was not found.", status=404)
    return invitation


def invitation_accept_by_id(*, user: User, invitation_id: int) -> Membership:
    """Accept from the overview: only an invitation to the user's own, verified address."""
    return invitation_accept(invitation=_invitation_for_invitee(user=user, invitation_id=invitation_id),
                             user=user, via_link=False)


@transaction.atomic
def invitation_decline(*, user: User, invitation: Invitation | None = None, invitation_id: int | None = None) -> None:
    """The invitee says no: the invitation is gone (the team may invite again)."""
    if invitation is None:
        invitation = _invitation_for_invitee(user=user, invitation_id=invitation_id)
    _invitation_check_invitee(invitation, user)
    with account_context(account_id=invitation.account_id):
        Invitation.objects.for_account(invitation.account_id).filter(pk=invitation.pk, accepted_at__isnull=True).delete()


def invitation_cancel(*, account: Account, actor: User, invitation_id: int) -> None:
    _require_manager(account=account, actor=actor)
    if Invitation.objects.for_account(account).filter(pk=invitation_id, accepted_at__isnull=True).delete()[0]:
        audit_record(account=account, action="invitation.cancel", actor=actor, target=f"invitation {invitation_id}")


def _owner_count(account: Account) -> int:
    return Membership.objects.for_account(account).filter(role=Role.OWNER).count()


def _lock_memberships(account: Account) -> None:
    # NOTE: two owners demoting each other at once must not leave the account ownerless:
    # every owner-count check runs with the account's memberships locked.
    list(Membership.objects.for_account(account).select_for_update().values_list("pk", flat=True))


# `by_staff=True` in the member services below: support staff in the Django admin, who are no
# member of the team and are authorised by the admin's own permissions instead of a team
# role. Everything else is the Team page's: the last owner stays one, one audit entry (the
# staff user's, named by audit.actors), and the member's open sockets are told.


@transaction.atomic
def member_add(*, account: Account, actor: User, user: User, role: str, by_staff: bool = False) -> Membership:
    """Make `user` a member with `role`, at once (the Team page invites instead: the person
    joins when they accept). Owners and admins, within the roles they may grant."""
    if by_staff:
        _check_role(role)
    else:
        _check_grantable(_require_manager(account=account, actor=actor), role)
    if account.deleted_at is not None:
        raise AccountError(AccountErrorCode.ACCOUNT_DELETED, "This account was deleted: nobody can join it.", field="account")
    members = Membership.objects.for_account(account)
    if members.filter(user=user).exists():
        raise AccountError(AccountErrorCode.ALREADY_MEMBER, f"{user.email} is already a member of this account.", field="user")
    membership = members.create(account=account, user=user, role=role)
    audit_record(account=account, action="member.add", actor=actor, target=user.email, detail={"role": role})
    return membership


@transaction.atomic
def member_change_role(*, account: Account, actor: User, membership_id: int, role: str,
                       by_staff: bool = False) -> Membership:
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
        raise AccountError(AccountErrorCode.LAST_OWNER, "The last owner cannot be demoted. Make someone else an owner first.")
    audit_record(account=account, action="member.role_change", actor=actor, target=membership.user.email, detail={"from": membership.role, "to": role})
    membership.role = role
    membership.save(update_fields=["role"])
    _invitations_past_rights_cancel(account=account, inviter_id=membership.user_id, membership=membership, actor=actor)
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
        verb = "leave" if membership.user_id == actor.pk else "be removed"
        raise AccountError(AccountErrorCode.LAST_OWNER, f"The last owner cannot {verb}. Make someone else an owner first.")
    membership.delete()
    audit_record(account=account, action="member.remove", actor=actor, target=membership.user.email, detail={"role": membership.role})
    _invitations_past_rights_cancel(account=account, inviter_id=membership.user_id, membership=None, actor=actor)
    member_access_end(account_id=account.pk, user_id=membership.user_id)


def member_access_end(*, account_id: int, user_id: int) -> None:
    """What follows a membership's removal, in its transaction (the Team page and the admin):
    the apps above drop the person's grants (restricted collections), and their open sockets
    close (4401) once it commits."""
    principal_access_ended.send(sender=Membership, account_id=account_id, user_id=user_id)
    sockets.notify_on_commit(sockets.member_group(account_id, user_id), sockets.REVOKED)


@transaction.atomic
def api_key_create(*, account: Account, actor: User | None, name: str,
                   scope: str = KeyScope.WRITE) -> tuple[ApiKey, str]:
    """A new key with `scope` read (search and chat) or write (also upload, delete, reindex).
    Returns (key, raw secret); the secret is never stored or shown again. `actor=None` is an
    operator (manage.py create_account), who keeps the write scope every key used to have."""
    if actor is not None:
        _require_manager(account=account, actor=actor, action=Action.KEYS_MANAGE)
    name = (name or "").strip()
    if has_control_characters(name):
        raise AccountError(CoreErrorCode.INVALID_NAME, CONTROL_CHARACTERS_MESSAGE, field="name")
    if not name:
        raise AccountError(CoreErrorCode.INVALID_NAME, "Give the key a name, e.g. the integration that will use it.", field="name")
    if scope not in KeyScope.values:
        raise AccountError(AccountErrorCode.INVALID_SCOPE, "Choose a scope: read (search and chat) or write (also upload, "
                                            "delete and reindex documents).", field="scope")
    raw = API_KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.for_account(account).create(
        account=account, name=name[:100], prefix=raw[:10], key_hash=hash_key(raw), created_by=actor, scope=scope)
    audit_record(account=account, action="key.create", actor=actor, target=f"{key.name} ({key.prefix}…)",
                 detail={"scope": scope})
    return key, raw


@transaction.atomic
def api_key_revoke(*, account: Account, actor: User | None, key_id: int) -> ApiKey:
    """Revoke a key (idempotent): it answers 401 from now on, its access to restricted
    collections goes in the same transaction, and its open sockets close on commit."""
    if actor is not None:
        _require_manager(account=account, actor=actor, action=Action.KEYS_MANAGE)
    key = ApiKey.objects.for_account(account).filter(pk=key_id).first()
    if key is None:
        raise AccountError(CoreErrorCode.NOT_FOUND, "That API key was not found.", status=404)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit_record(account=account, action="key.revoke", actor=actor, target=f"{key.name} ({key.prefix}…)")
        principal_access_ended.send(sender=ApiKey, account_id=account.pk, api_key_id=key.pk)
    # Its open sockets close (4401) once this commits (also on a repeated revoke: a socket
    # that missed the first notice hears the second).
    sockets.notify_on_commit(sockets.key_group(key.pk), sockets.REVOKED)
    return key


def api_key_touch(*, key: ApiKey) -> None:
    """Record use, at most once a minute per key so busy integrations don't write per call."""
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.for_account(key.account_id).filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now


# --- deleting an account ---------------------------------------------------------------------

def account_delete_confirmation_check(*, account: Account, confirm) -> None:
    """The person typed the account's name (surrounding spaces aside; case matters, as the
    page asks for exactly the name), or an AccountError naming what is missing."""
    if not isinstance(confirm, str) or not confirm.strip():
        raise AccountError(AccountErrorCode.CONFIRMATION_REQUIRED, f"Type the account's name, “{account.name}”, to confirm that "
                           "it should be deleted.", field="confirm")
    if confirm.strip() != account.name.strip():
        raise AccountError(AccountErrorCode.CONFIRMATION_MISMATCH, f"The confirmation does not match the account's name. Type "
                           f"“{account.name}” exactly to delete it.", field="confirm")


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
        audit_record(account=account, action="account.delete", actor=actor, target=account.name, detail={
            "members_removed": members_removed, "keys_revoked": keys_revoked,
            "invitations_cancelled": invitations_cancelled})
        account_deleted.send(sender=Account, account=account, actor=actor)
        sockets.account_sockets_close_on_commit(account.pk)
    return account
