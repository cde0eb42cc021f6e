"""Who a verified identity from the single sign-on provider signs in as, and the owner's
switch that makes an account require single sign-on.

The rules (docs/operations/sso.md):
- only an address the provider says is verified (`email_verified: true`) signs in;
- the provider's subject (`sub`) already linked to a user signs in that user, whatever
  address the provider now gives (a change of address at the provider keeps the person);
- an unlinked subject whose address is a user's signs in that user and is linked to them,
  unless that user already has another subject at this provider: then it is refused
  (`sso_identity_conflict`), never a quiet takeover; the link is audited in the person's accounts;
- an unknown address with a pending invitation gets a user who joins that account (the
  newest invitation; others stay on the overview), and no team of their own;
- any other address is refused, unless OIDC_CREATE_USERS: then a user and their own team,
  as sign-up makes them (the address is verified, so the team gets the starting credits).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.error_codes import SsoErrorCode
from accounts.models import Account, SsoIdentity, User
from accounts.permissions import Action
from accounts.selectors import invitation_list_for_user, membership_list_for_user
from accounts.services.invitations import invitation_accept
from accounts.services.members import _require_manager
from accounts.services.signup import team_create
from accounts.services.verification import _email_mark_verified
from accounts.sso.errors import SsoError
from accounts.sso.oidc import Identity, sso_enabled
from audit.services import audit_record
from core import sockets
from core.tenancy import account_context
from core.text import has_control_characters


@dataclass(frozen=True)
class SsoSignIn:
    user: User
    account_id: int | None  # where the session lands (None: the person's last account)
    message: str


@transaction.atomic
def sso_sign_in(*, identity: Identity) -> SsoSignIn:
    """The user this identity signs in as, made or linked per the module's rules; an SsoError
    (nothing written) when it may not sign in. The provider's verified address is the whole
    proof (its MFA counts; no second factor of ours follows), except for support staff and
    superusers in a team that requires them to use their password and two-factor code."""
    outcome = _sso_sign_in(identity)
    _require_staff_may_use_sso(outcome.user)
    return outcome


def _require_staff_may_use_sso(user: User) -> None:
    if not (user.is_staff or user.is_superuser):
        return
    strict = [m.account.name for m in membership_list_for_user(user=user) if m.account.staff_password_2fa]
    if strict:
        raise SsoError(
            SsoErrorCode.SSO_STAFF_PASSWORD_REQUIRED,
            f"{user.email} is a support or admin account, and "
            f"{strict[0]} requires those to sign in with their password and two-factor code, not single "
            "sign-on. Log in with your password below.",
            status=403,
        )


def _sso_sign_in(identity: Identity) -> SsoSignIn:
    if not identity.email_verified or not identity.email:
        raise SsoError(
            SsoErrorCode.SSO_EMAIL_UNVERIFIED,
            f"Your sign-in provider has not verified the address "
            f"{identity.email or '(none given)'}, so it cannot sign you in here. Verify it with your "
            "provider, then try again.",
            status=403,
        )
    link = (
        SsoIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=identity.issuer, subject=identity.subject)
        .first()
    )
    if link is not None:
        _require_active(link.user)
        link.email, link.last_login_at = identity.email, timezone.now()
        link.save(update_fields=["email", "last_login_at"])
        return SsoSignIn(user=link.user, account_id=None, message=f"Signed in as {link.user.email}.")
    user = User.objects.select_for_update().filter(email__iexact=identity.email).first()
    if user is not None:
        return _existing_user_sign_in(identity, user)
    return _new_user_sign_in(identity)


def _require_active(user: User) -> None:
    if not user.is_active:
        raise SsoError(
            SsoErrorCode.SSO_USER_INACTIVE, "This user is deactivated. Ask your team's owner or support.", status=403
        )


def _link(identity: Identity, user: User) -> SsoIdentity:
    return SsoIdentity.objects.create(
        issuer=identity.issuer, subject=identity.subject, user=user, email=identity.email, last_login_at=timezone.now()
    )


def _existing_user_sign_in(identity: Identity, user: User) -> SsoSignIn:
    _require_active(user)
    links = SsoIdentity.objects.filter(issuer=identity.issuer, user=user)
    # NOTE: the user row is locked (sso_sign_in): a second first sign-in of the same subject at
    # once waits here, then finds the link the first one made and signs in through it.
    if links.filter(subject=identity.subject).exists():
        return SsoSignIn(user=user, account_id=None, message=f"Signed in as {user.email}.")
    if links.exists():
        raise SsoError(
            SsoErrorCode.SSO_IDENTITY_CONFLICT,
            f"{user.email} is already linked to another identity at "
            "your sign-in provider, so this one cannot sign in as it. Ask your team's owner or support.",
            status=403,
        )
    _link(identity, user)
    # The provider vouches for the address: as good as the emailed verification link.
    _email_mark_verified(user)
    for membership in membership_list_for_user(user=user):
        with account_context(account_id=membership.account_id):
            audit_record(
                account=membership.account_id,
                action="sso.link",
                actor=user,
                target=user.email,
                detail={"issuer": identity.issuer, "subject": identity.subject},
            )
    return SsoSignIn(user=user, account_id=None, message=f"Signed in as {user.email} through single sign-on.")


def _new_user(identity: Identity) -> User:
    """A user who signs in only through SSO (no usable password; a password reset can give one)."""
    name = "" if has_control_characters(identity.name) else identity.name.strip()
    try:
        with transaction.atomic():
            user = User.objects.create_user(email=identity.email, password=None, full_name=name)
    except IntegrityError as exc:
        # NOTE: two first sign-ins of one new address at once: the other made the user.
        raise SsoError(
            SsoErrorCode.SSO_IDENTITY_CONFLICT,
            "Another sign-in with this address is under way. Try again in a moment.",
            status=409,
        ) from exc
    _link(identity, user)
    _email_mark_verified(user)
    user.refresh_from_db()
    return user


def _new_user_sign_in(identity: Identity) -> SsoSignIn:
    user = _new_user(identity)
    invitations = invitation_list_for_user(user=user)
    if invitations:
        invitation = invitations[0]
        membership = invitation_accept(invitation=invitation, user=user, via_link=False)
        return SsoSignIn(
            user=user,
            account_id=membership.account_id,
            message=f"You joined {invitation.account.name} as {invitation.get_role_display().lower()}.",
        )
    if not settings.OIDC_CREATE_USERS:
        raise SsoError(
            SsoErrorCode.SSO_USER_UNKNOWN,
            f"There is no Groundwork user with the address {identity.email}"
            ", and no invitation for it. Ask your team's owner to invite you, then sign in again.",
            status=403,
        )
    # As sign-up makes it: the person's own team, and as the address is verified (the provider
    # vouches for it), the starting credits (team_create: one grant per verified person).
    account = team_create(name=f"{user.get_short_name()}'s team", owner=user)
    user.signup_account = user.last_account = account
    user.save(update_fields=["signup_account", "last_account"])
    return SsoSignIn(user=user, account_id=account.pk, message=f"Welcome to Groundwork. {account.name} is ready.")


@transaction.atomic
def account_staff_password_2fa_set(*, account: Account, actor: User, required: bool) -> Account:
    """The owner's switch "Staff must use a password + 2FA" (owners only: Action.SSO_REQUIRE;
    audited): members who are support staff or superusers may not sign in through SSO."""
    _require_manager(account=account, actor=actor, action=Action.SSO_REQUIRE)
    account, _ = _account_switch_set(
        account=account, actor=actor, field="staff_password_2fa", value=required, action="account.staff_password_2fa"
    )
    return account


def _account_switch_set(*, account: Account, actor: User, field: str, value: bool, action: str) -> tuple[Account, bool]:
    """Set one of the account's switches under its row lock, audited when it changed.
    Returns (account, changed)."""
    account = Account.objects.select_for_update().get(pk=account.pk)
    if getattr(account, field) == value:
        return account, False
    setattr(account, field, value)
    account.save(update_fields=[field])
    audit_record(account=account, action=action, actor=actor, target=account.name, detail={"required": value})
    return account, True


@transaction.atomic
def account_sso_required_set(
    *, account: Account, actor: User, required: bool, actor_signed_in_with_sso: bool
) -> Account:
    """The owner's switch "Members must sign in with SSO" (owners only: Action.SSO_REQUIRE;
    audited). Turning it on needs SSO set up here and the owner's own session signed in
    through it, so nobody locks the team out with a switch nobody can get past."""
    _require_manager(account=account, actor=actor, action=Action.SSO_REQUIRE)
    if required and not sso_enabled():
        raise SsoError(
            SsoErrorCode.SSO_DISABLED,
            "Single sign-on is not set up on this server, so it cannot be required.",
            status=400,
        )
    if required and not actor_signed_in_with_sso:
        raise SsoError(
            SsoErrorCode.SSO_REQUIRED,
            "Sign in with SSO first (log out, then “Sign in with SSO”): "
            "that proves it works for you before it is required of everyone.",
            status=400,
        )
    account, changed = _account_switch_set(
        account=account, actor=actor, field="sso_required", value=required, action="account.sso_required"
    )
    if changed and required:  # open sockets re-read their principal: a password session's closes (4401)
        sockets.notify_on_commit(sockets.account_group(account.pk), sockets.CHANGED)
    return account
