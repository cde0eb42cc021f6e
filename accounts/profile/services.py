"""Writes to a person's own sign-in details and to the team's name.

Each change is audited in every account the person belongs to (the audit log is the
account's, and these are security-relevant for the team: an owner sees that a member's
password changed or their two-factor sign-in was turned off). A change that ends other
sessions also tells the person's open websockets to re-check (core/sockets.py), and each
socket whose session no longer signs in closes (chat/consumers.py)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.core import signing
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from accounts import ratelimit
from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.models import Account, User
from accounts.permissions import Action, actor_require
from accounts.selectors import membership_list_for_user
from accounts.services.signup import _clean_email
from accounts.services.verification import _email_mark_verified, _send_mail
from audit.services import audit_record
from core import sockets
from core.error_codes import CoreErrorCode
from core.tenancy import account_context
from core.text import CONTROL_CHARACTERS_MESSAGE, has_control_characters

EMAIL_CHANGE_SALT = "accounts.change-email"
NAME_MAX = 150
TEAM_NAME_MAX = 120


def _account_ids(user: User) -> list[int]:
    return [m.account_id for m in membership_list_for_user(user=user)]


_SELF = object()


def user_audit_record(*, user: User, action: str, detail: dict | None = None, actor=_SELF) -> None:
    """One entry per account of the person, in the caller's transaction. The actor is the
    person unless given (None: the request's actor, or the system outside a request)."""
    for account_id in _account_ids(user):
        with account_context(account_id=account_id):
            audit_record(
                account=account_id,
                action=action,
                actor=user if actor is _SELF else actor,
                target=user.email,
                detail=detail,
            )


def user_sockets_recheck(*, user: User) -> None:
    """Once the transaction commits, the person's open sockets (in every account) re-check
    their principal and their session; those of ended sessions close (4401)."""
    for account_id in _account_ids(user):
        sockets.notify_on_commit(sockets.member_group(account_id, user.pk), sockets.CHANGED)


def _check_password(user: User, password: str, *, field: str = "current_password") -> None:
    """The person's current password, or AccountError. Wrong guesses count like failed logins
    (LOGIN_FAILURES_PER_EMAIL, per person): a borrowed session is no way to guess it."""
    limit = ratelimit.Limit("settings-password", str(user.pk), settings.LOGIN_FAILURES_PER_EMAIL)
    wait = limit.wait_seconds()
    if wait:
        raise AccountError(CoreErrorCode.RATE_LIMITED, ratelimit.too_many_message(wait), status=429, field=field)
    if not password or not user.check_password(password):
        limit.hit()
        raise AccountError(AccountErrorCode.WRONG_PASSWORD, "That is not your current password.", field=field)


@transaction.atomic
def user_name_change(*, user: User, full_name: str) -> User:
    """Set the person's name (may be empty: the pages then show their email)."""
    full_name = (full_name or "").strip()
    if has_control_characters(full_name):
        raise AccountError(CoreErrorCode.INVALID_NAME, CONTROL_CHARACTERS_MESSAGE, field="full_name")
    if len(full_name) > NAME_MAX:
        raise AccountError(CoreErrorCode.INVALID_NAME, f"A name has at most {NAME_MAX} characters.", field="full_name")
    before = user.full_name
    if full_name == before:
        return user
    user.full_name = full_name
    user.save(update_fields=["full_name"])
    user_audit_record(user=user, action="user.name_change", detail={"from": before, "to": full_name})
    return user


def _email_taken(email: str, *, by_other_than: User) -> bool:
    return User.objects.filter(email__iexact=email).exclude(pk=by_other_than.pk).exists()


def email_change_limits(user: User) -> list[ratelimit.Limit]:
    return [ratelimit.Limit("email-change", str(user.pk), settings.VERIFICATION_EMAILS_PER_USER)]


def user_email_change_request(*, user: User, new_email: str, password: str, site_url: str) -> str:
    """Email a link to `new_email`; the address changes only when it is opened. Needs the
    current password (a borrowed session must not move the account to another mailbox).
    Returns the cleaned new address."""
    _check_password(user, password, field="password")
    new_email = _clean_email(new_email)
    if new_email == user.email.lower():
        raise AccountError(AccountErrorCode.EMAIL_UNCHANGED, f"{new_email} is already your address.", field="new_email")
    if _email_taken(new_email, by_other_than=user):
        raise AccountError(
            AccountErrorCode.DUPLICATE_EMAIL,
            "Another user already has that address; choose another.",
            field="new_email",
        )
    limits = email_change_limits(user)
    wait = ratelimit.wait_for(limits)
    if wait:
        raise AccountError(
            CoreErrorCode.RATE_LIMITED,
            f"Too many change links were sent: {ratelimit.try_again_in(wait)}.",
            status=429,
            field="new_email",
        )
    limits[0].hit()
    # "c": the person's count of confirmed changes, so the link is void once any change is made.
    token = signing.dumps(
        {"u": user.pk, "o": user.email.lower(), "e": new_email, "c": user.email_change_count}, salt=EMAIL_CHANGE_SALT
    )
    link = site_url.rstrip("/") + reverse("accounts:email-change-confirm", args=[token])
    with transaction.atomic():
        _send_mail(
            to=new_email,
            template="accounts/email/email_change.txt",
            context={
                "user": user,
                "new_email": new_email,
                "link": link,
                "days": settings.EMAIL_VERIFICATION_MAX_AGE_DAYS,
            },
        )
    return new_email


@transaction.atomic
def user_email_change_confirm(*, token: str) -> User:
    """Apply the change a link was made for: the new address becomes the login (verified:
    the link proved it) and the old address is told. A link works once: no change may have
    been confirmed since it was made (the change count it names), even one that brought the
    address back to where it was; and not if someone took the new one since."""
    try:
        data = signing.loads(
            token, salt=EMAIL_CHANGE_SALT, max_age=timedelta(days=settings.EMAIL_VERIFICATION_MAX_AGE_DAYS)
        )
    except signing.SignatureExpired as exc:
        raise AccountError(
            AccountErrorCode.LINK_EXPIRED, "This link has expired. Ask for a new one on your settings page.", status=410
        ) from exc
    except signing.BadSignature as exc:
        raise AccountError(
            AccountErrorCode.LINK_INVALID, "This link is not valid. Copy the whole link from the email.", status=404
        ) from exc
    user = User.objects.select_for_update().filter(pk=data.get("u")).first()
    new_email, old_email = data.get("e", ""), data.get("o", "")
    if user is None:
        raise AccountError(AccountErrorCode.LINK_INVALID, "This link is not valid.", status=404)
    if user.email.lower() == new_email:
        raise AccountError(
            AccountErrorCode.LINK_USED, f"This link was used already: your address is {new_email}.", status=410
        )
    if data.get("c", 0) != user.email_change_count:
        raise AccountError(
            AccountErrorCode.LINK_USED,
            "This link was used already, or your address changed since it "
            "was sent. Ask for a new one on your settings page.",
            status=410,
        )
    if user.email.lower() != old_email:
        raise AccountError(
            AccountErrorCode.LINK_INVALID, "This link was made for an address you no longer have.", status=404
        )
    if _email_taken(new_email, by_other_than=user):
        raise AccountError(
            AccountErrorCode.DUPLICATE_EMAIL, "Another user has taken that address since; choose another.", status=409
        )
    user.email, user.email_change_count = new_email, user.email_change_count + 1
    try:
        with transaction.atomic():
            user.save(update_fields=["email", "email_change_count"])
    except IntegrityError as exc:  # NOTE: someone signed up with it between the check and the save
        raise AccountError(
            AccountErrorCode.DUPLICATE_EMAIL, "Another user has taken that address since; choose another.", status=409
        ) from exc
    if not _email_mark_verified(user):
        User.objects.filter(pk=user.pk).update(email_verified_at=timezone.now())
    user.refresh_from_db()
    _send_mail(
        to=old_email,
        template="accounts/email/email_changed_notice.txt",
        context={"user": user, "old_email": old_email, "new_email": new_email},
    )
    user_audit_record(user=user, action="user.email_change", detail={"from": old_email, "to": new_email})
    return user


@transaction.atomic
def user_password_change(*, user: User, current_password: str, new_password: str) -> User:
    """Set a new password (Django's validators). Every session signed in with the old one
    ends; the caller keeps its own (accounts.profile.views.session_keep)."""
    _check_password(user, current_password)
    try:
        validate_password(new_password, user)
    except ValidationError as exc:
        raise AccountError(AccountErrorCode.WEAK_PASSWORD, " ".join(exc.messages), field="new_password") from exc
    user.set_password(new_password)
    user.save(update_fields=["password"])
    user_audit_record(user=user, action="user.password_change")
    user_sockets_recheck(user=user)
    return user


@transaction.atomic
def user_sessions_end_others(*, user: User) -> User:
    """Every session of the person signed in before this call ends (its hash no longer
    matches); the caller keeps its own. Their open websockets re-check and close."""
    User.objects.filter(pk=user.pk).update(session_epoch=F("session_epoch") + 1)
    user.refresh_from_db(fields=["session_epoch"])
    user_audit_record(user=user, action="user.sessions_end")
    user_sockets_recheck(user=user)
    return user


def name_clean(name: str, *, what: str, limit: int, default: str = "") -> str:
    """A name of a `what` (a team, a SCIM token) as every form takes it: trimmed, `default`
    when empty (none: refused), no control characters (core/text.py), at most `limit`."""
    name = (name or "").strip() or default
    if not name:
        raise AccountError(CoreErrorCode.INVALID_NAME, f"Give the {what} a name.", field="name")
    if has_control_characters(name):
        raise AccountError(CoreErrorCode.INVALID_NAME, CONTROL_CHARACTERS_MESSAGE, field="name")
    if len(name) > limit:
        raise AccountError(CoreErrorCode.INVALID_NAME, f"A {what} name has at most {limit} characters.", field="name")
    return name


def team_name_clean(name: str) -> str:
    """A team's name, as sign-up and team creation take it."""
    return name_clean(name, what="team", limit=TEAM_NAME_MAX)


@transaction.atomic
def account_rename(*, account: Account, actor: User, name: str) -> Account:
    """Rename the team: its owners only (accounts/permissions.py, account.rename)."""
    actor_require(
        account=account, actor=actor, action=Action.ACCOUNT_RENAME, outsider="Only the team's owners can rename it."
    )
    name = team_name_clean(name)
    account = Account.objects.select_for_update().get(pk=account.pk)
    before = account.name
    if name != before:
        account.name = name
        account.save(update_fields=["name"])
        audit_record(
            account=account, action="account.rename", actor=actor, target=name, detail={"from": before, "to": name}
        )
    return account
