"""SCIM's writes: the account's provisioning tokens, and provisioning people into it.

Every provisioning write runs in the token's account context (accounts/scim/views.py) and
goes through the Team page's own member services (accounts/services/members.py): a
deactivation is a member removal (its sockets close, its grants go, the last owner stays),
a reactivation a member addition with the role the person had.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction

from accounts.domains.selectors import domain_is_verified_for
from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.models import Account, Membership, Role, User
from accounts.permissions import Action
from accounts.profile.services import name_clean
from accounts.scim.errors import ScimError, ScimType
from accounts.scim.models import ScimIdentity, ScimToken
from accounts.scim.selectors import scim_identity_access_by_id, scim_identity_list_in_role
from accounts.selectors import membership_list_for_user
from accounts.services.invitations import invitation_send
from accounts.services.members import _lock_memberships, _require_manager, member_add, member_change_role, member_remove
from accounts.services.signup import user_is_unclaimed
from accounts.tokens import secret_access_by_id, secret_issue, secret_revoke, secret_touch
from audit.actors import Actor
from audit.models import ActorKind
from audit.services import audit_record
from core.text import has_control_characters


def scim_actor(token: ScimToken) -> Actor:
    """Who the audit log names for what a token changes: the identity provider, by the
    token's name, prefix and maker."""
    maker = token.created_by.email if token.created_by_id and token.created_by else "a former owner"
    return Actor(ActorKind.SYSTEM, None, f"SCIM provisioning ({token.prefix}…, “{token.name}”, made by {maker})")


# --- Tokens (the Team page, owners) -------------------------------------------------------------

TOKEN_NAME_MAX = 100
DEFAULT_TOKEN_NAME = "SCIM token"


@transaction.atomic
def scim_token_create(*, account: Account, actor: User, name: str = "") -> tuple[ScimToken, str]:
    """A new provisioning token for the account (owners only), named (e.g. after the
    provider; "SCIM token" when left empty). Returns (token, raw secret); the secret is never
    stored or shown again. It works while `actor` stays an owner (accounts/scim/tokens.py)."""
    _require_manager(account=account, actor=actor, action=Action.SCIM_MANAGE)
    name = name_clean(name, what="SCIM token", limit=TOKEN_NAME_MAX, default=DEFAULT_TOKEN_NAME)
    return secret_issue(ScimToken, account=account, actor=actor, name=name)


@transaction.atomic
def scim_token_revoke(*, account: Account, actor: User, token_id: int) -> ScimToken:
    """Revoke a token (idempotent): /scim/v2/ answers it 401 from now on."""
    _require_manager(account=account, actor=actor, action=Action.SCIM_MANAGE)
    token = secret_access_by_id(ScimToken, account=account, secret_id=token_id)
    secret_revoke(token, account=account, actor=actor)
    return token


def scim_token_touch(*, token: ScimToken) -> None:
    """Record use, at most once a minute (a provider's sync sends many requests)."""
    secret_touch(token)


# --- Identities -------------------------------------------------------------------------------


def scim_identities_ensure(*, account: Account) -> None:
    """Every current member has an identity (an `id` the provider can match and keep): the
    members who joined on the Team page, by invitation or SSO, before the provider looked.
    One statement; a concurrent request's identical insert is ignored."""
    members = (
        Membership.objects.for_account(account)
        .exclude(user_id__in=ScimIdentity.objects.for_account(account).values("user_id"))
        .values_list("user_id", "role")
    )
    ScimIdentity.objects.for_account(account).bulk_create(
        [ScimIdentity(account=account, user_id=user_id, role=role) for user_id, role in members], ignore_conflicts=True
    )


@dataclass
class UserChanges:
    """What a POST, PUT or PATCH said about a user; None: not mentioned."""

    user_name: str | None = None
    external_id: str | None = None
    given_name: str | None = None
    family_name: str | None = None
    display_name: str | None = None
    emails: list | None = None
    active: bool | None = None
    touched: set = field(default_factory=set)


def _clean_text(value, name: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ScimError(400, f"{name} must be a string.", ScimType.INVALID_VALUE)
    value = value.strip()
    if has_control_characters(value):
        raise ScimError(400, f"{name} may not contain control characters.", ScimType.INVALID_VALUE)
    if len(value) > limit:
        raise ScimError(400, f"{name} may have at most {limit} characters.", ScimType.INVALID_VALUE)
    return value


# A user's email column's length (accounts.models.User.email).
USER_NAME_MAX = 254


def _clean_user_name(value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ScimError(400, "userName is required: the person's email address.", ScimType.INVALID_VALUE)
    email = value.strip().lower()
    if len(email) > USER_NAME_MAX:
        raise ScimError(
            400, f"userName may have at most {USER_NAME_MAX} characters (an email address).", ScimType.INVALID_VALUE
        )
    try:
        validate_email(email)
    except ValidationError as exc:
        raise ScimError(
            400,
            f"userName must be an email address (the person's login): {value!r} is not one.",
            ScimType.INVALID_VALUE,
        ) from exc
    return email


def _clean_emails(value) -> list:
    if not isinstance(value, list) or len(value) > 10:
        raise ScimError(
            400, 'emails must be a list of at most 10 {"value", "type", "primary"} objects.', ScimType.INVALID_VALUE
        )
    emails = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("value"), str):
            raise ScimError(400, 'Each of emails must be an object with a string "value".', ScimType.INVALID_VALUE)
        address = item["value"].strip()
        try:
            validate_email(address)
        except ValidationError as exc:
            raise ScimError(400, f"emails: {address!r} is not an email address.", ScimType.INVALID_VALUE) from exc
        emails.append(
            {
                "value": address,
                "type": _clean_text(item.get("type") or "work", "emails.type", 20),
                "primary": item.get("primary") in (True, "true", "True"),
            }
        )
    return emails


def _identity_apply(identity: ScimIdentity, changes: UserChanges) -> None:
    """The provider's attributes onto this account's identity (never onto the global user:
    another team's directory may say otherwise)."""
    if changes.external_id is not None:
        identity.external_id = _clean_text(changes.external_id, "externalId", 255)
    if changes.given_name is not None:
        identity.given_name = _clean_text(changes.given_name, "name.givenName", 150)
    if changes.family_name is not None:
        identity.family_name = _clean_text(changes.family_name, "name.familyName", 150)
    if changes.display_name is not None:
        identity.display_name = _clean_text(changes.display_name, "displayName", 150)
    if changes.emails is not None:
        identity.emails = _clean_emails(changes.emails)


def _full_name(changes: UserChanges) -> str:
    parts = [p for p in (changes.given_name, changes.family_name) if isinstance(p, str) and p.strip()]
    name = " ".join(p.strip() for p in parts) or (changes.display_name or "")
    return _clean_text(name, "name", 150) if isinstance(name, str) else ""


def _member(account: Account, user_id: int) -> Membership | None:
    return Membership.objects.for_account(account).filter(user_id=user_id).first()


def _audit(*, account: Account, token: ScimToken, action: str, identity: ScimIdentity, detail: dict) -> None:
    audit_record(
        account=account,
        action=action,
        actor=scim_actor(token),
        target=identity.user.email,
        detail={"scim_id": str(identity.scim_id), **detail},
    )


@dataclass(frozen=True)
class ScimInvited:
    """What POST /Users did for someone who already uses Groundwork: invited them (or found
    their invitation pending); the view answers 409 with `detail`."""

    email: str
    detail: str


def _needs_consent(account: Account, user: User) -> bool:
    """A person who signed in, has a password, or belongs to another team joins only by
    accepting an invitation, unless their address is in a domain this account verified."""
    if domain_is_verified_for(account=account, email=user.email):
        return False
    if not user_is_unclaimed(user):
        return True
    return any(m.account_id != account.pk for m in membership_list_for_user(user=user))


def _invite_instead(*, account: Account, token: ScimToken, email: str, site_url: str) -> ScimInvited:
    consent = f"{email} already uses Groundwork, so your identity provider cannot add them without their consent: "
    try:
        invitation_send(
            account=account,
            inviter=token.created_by,
            email=email,
            role=Role.MEMBER,
            site_url=site_url,
            audit_actor=scim_actor(token),
        )
    except AccountError as exc:
        if exc.code != AccountErrorCode.ALREADY_INVITED:
            raise ScimError(exc.status, exc.message) from exc
        return ScimInvited(
            email,
            consent + "their invitation to this account is pending until they accept it (the Team page lists it).",
        )
    return ScimInvited(
        email,
        consent + "we emailed them an invitation, pending until they accept it (the Team page "
        "lists it); then they are a member and listed here. People in a domain the "
        "account verified (the Team page, Verified domains) join at once.",
    )


@transaction.atomic
def scim_user_create(
    *, account: Account, token: ScimToken, changes: UserChanges, site_url: str
) -> ScimIdentity | ScimInvited:
    """POST /Users: a new address gets a user (who signs in by SSO, or sets a password by
    signing up or "forgot password") who joins the account as a member, at once, as does an
    existing user in a domain the account verified, or one nobody ever signed in as who
    belongs to no other team. Anyone else who already uses Groundwork is invited instead
    (ScimInvited). `active: false` records the identity without a membership. 409 uniqueness
    if the person is already provisioned or a member here."""
    email = _clean_user_name(changes.user_name)
    user = User.objects.filter(email__iexact=email).first()
    if (
        user is not None
        and not (ScimIdentity.objects.for_account(account).filter(user=user).exists() or _member(account, user.pk))
        and _needs_consent(account, user)
    ):
        return _invite_instead(account=account, token=token, email=email, site_url=site_url)
    if user is None:
        try:
            with transaction.atomic():
                user = User.objects.create_user(email=email, password=None, full_name=_full_name(changes))
        except IntegrityError:  # NOTE: created by a concurrent request in between: use that one
            user = User.objects.get(email__iexact=email)
    if ScimIdentity.objects.for_account(account).filter(user=user).exists() or _member(account, user.pk):
        raise ScimError(
            409,
            f'{email} is already a member of this account; look them up with filter=userName eq "{email}".',
            ScimType.UNIQUENESS,
        )
    identity = ScimIdentity(account=account, user=user, role=Role.MEMBER, provisioned=True)
    _identity_apply(identity, changes)
    try:
        # NOTE: two POSTs for one person at once: the unique constraints (one identity, one
        # membership per account and person) let one in; the other is the same 409.
        with transaction.atomic():
            identity.save()
            if changes.active is not False:
                _membership_start(account=account, token=token, identity=identity)
    except IntegrityError as exc:
        raise ScimError(409, f"{email} is already a member of this account.", ScimType.UNIQUENESS) from exc
    _audit(
        account=account,
        token=token,
        action="scim.user_create",
        identity=identity,
        detail={"active": changes.active is not False},
    )
    return identity


def _membership_start(*, account: Account, token: ScimToken, identity: ScimIdentity) -> None:
    # The role they had when the membership ended, but never owner: an owner an owner removed
    # does not come back as one with a provider's sync; the owners group gives it explicitly.
    role = Role.MEMBER if identity.role == Role.OWNER else identity.role
    member_add(
        account=account, actor=scim_actor(token), user=identity.user, role=role, by_staff=True
    )  # the owner who made the token gave the provider this power


def _owner_change_check(*, account: Account, token: ScimToken, identity: ScimIdentity, membership: Membership) -> None:
    """Before a token deactivates or demotes an owner: only one who came from the identity
    provider (not one who joined on the Team page), and never the last owner besides the
    token's maker, so no token (a stale or stolen one above all) leaves its maker the only
    owner and locks the others out. Owners change such owners on the Team page."""
    if membership.role != Role.OWNER:
        return
    email = identity.user.email
    if not identity.provisioned:
        raise ScimError(
            403,
            f"{email} is an owner who did not come from your identity provider: only the team's "
            "owners change their role or membership, on the Team page.",
        )
    _lock_memberships(account)
    others = (
        Membership.objects.for_account(account)
        .filter(role=Role.OWNER)
        .exclude(user_id__in=[identity.user_id, token.created_by_id])
    )
    if not others.exists():
        raise ScimError(
            403,
            f"{email} is the last owner besides this token's maker: a token cannot leave its maker "
            "the only owner. Make someone else an owner first, or change this on the Team page.",
        )


def _membership_end(*, account: Account, token: ScimToken, identity: ScimIdentity) -> None:
    membership = _member(account, identity.user_id)
    if membership is None:
        return
    _owner_change_check(account=account, token=token, identity=identity, membership=membership)
    try:
        # The Team page's removal: the last owner stays; grants go; sockets close on commit;
        # the role at removal is kept on the identity for a reactivation.
        member_remove(account=account, actor=scim_actor(token), membership_id=membership.pk, by_staff=True)
    except AccountError as exc:
        raise ScimError(400, exc.message, ScimType.MUTABILITY) from exc


@transaction.atomic
def scim_user_update(
    *, account: Account, token: ScimToken, identity: ScimIdentity, changes: UserChanges
) -> ScimIdentity:
    """PUT and PATCH /Users/{id}: the identity's attributes, and `active` (false ends the
    membership here, as removing the member on the Team page does; true restores it with the
    role they had when it ended). userName is the person's login, shared by all their teams:
    it cannot be changed here (400 mutability)."""
    identity = ScimIdentity.objects.for_account(account).select_for_update().select_related("user").get(pk=identity.pk)
    if changes.user_name is not None and _clean_user_name(changes.user_name) != identity.user.email.lower():
        raise ScimError(
            400,
            "userName is the person's login email, shared with their other teams, and cannot be changed through SCIM.",
            ScimType.MUTABILITY,
        )
    _identity_apply(identity, changes)
    identity.save()
    is_member = _member(account, identity.user_id) is not None
    if changes.active is True and not is_member:
        _membership_start(account=account, token=token, identity=identity)
    elif changes.active is False and is_member:
        _membership_end(account=account, token=token, identity=identity)
    _audit(
        account=account,
        token=token,
        action="scim.user_update",
        identity=identity,
        detail={"attributes": sorted(changes.touched)},
    )
    return identity


@transaction.atomic
def scim_user_delete(*, account: Account, token: ScimToken, identity: ScimIdentity) -> None:
    """DELETE /Users/{id}: the membership ends (as deactivation) and the id is forgotten."""
    identity = ScimIdentity.objects.for_account(account).select_for_update().select_related("user").get(pk=identity.pk)
    _membership_end(account=account, token=token, identity=identity)
    _audit(account=account, token=token, action="scim.user_delete", identity=identity, detail={})
    identity.delete()


# --- Groups: the four roles ----------------------------------------------------------------------

# The fixed groups /Groups exposes (their id and displayName) and the role each one gives.
GROUP_ROLES = {"owners": Role.OWNER, "admins": Role.ADMIN, "members": Role.MEMBER, "viewers": Role.VIEWER}


def _identities_by_scim_id(account: Account, scim_ids: list[str]) -> list[ScimIdentity]:
    found = []
    for scim_id in scim_ids:
        try:
            found.append(scim_identity_access_by_id(account=account, scim_id=scim_id))
        except ScimError as exc:
            raise ScimError(400, f"No user with id {scim_id!r} in this account.", ScimType.INVALID_VALUE) from exc
    return found


def _role_set(*, account: Account, token: ScimToken, identity: ScimIdentity, role: str) -> None:
    membership = _member(account, identity.user_id)
    if membership is None:
        raise ScimError(
            400,
            f"{identity.user.email} is deactivated here: activate them before giving them a role.",
            ScimType.INVALID_VALUE,
        )
    if membership.role == role:
        return
    _owner_change_check(account=account, token=token, identity=identity, membership=membership)
    try:
        # The Team page's role change: the last owner stays one; open sockets re-check.
        member_change_role(
            account=account, actor=scim_actor(token), membership_id=membership.pk, role=role, by_staff=True
        )
    except AccountError as exc:
        raise ScimError(400, exc.message, ScimType.MUTABILITY) from exc


@transaction.atomic
def scim_group_members_change(
    *,
    account: Account,
    token: ScimToken,
    group: str,
    add: list[str],
    remove: list[str],
    replace: list[str] | None = None,
) -> None:
    """PATCH and PUT /Groups/{id}: a person added to a group gets its role; one removed from
    the group they are in falls back to member (removing from "members" changes nothing:
    it is where everyone provisioned starts). `replace`: the group's whole new list. Adds
    run first, so an owners' list that swaps one owner for another never has none."""
    role = GROUP_ROLES[group]
    if replace is not None:
        current = {str(i.scim_id) for i in scim_identity_list_in_role(account=account, role=role)}
        wanted = {str(i.scim_id) for i in _identities_by_scim_id(account, replace)}
        add, remove = [*add, *sorted(wanted - current)], [*remove, *sorted(current - wanted)]
    for identity in _identities_by_scim_id(account, add):
        _role_set(account=account, token=token, identity=identity, role=role)
    for identity in _identities_by_scim_id(account, remove):
        if role != Role.MEMBER and (m := _member(account, identity.user_id)) is not None and m.role == role:
            _role_set(account=account, token=token, identity=identity, role=Role.MEMBER)
