"""Sign-up, users and the teams people create, with their starting credits."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django.utils.text import slugify

from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.models import Account, Membership, Role, User
from accounts.services.verification import _email_mark_verified, _send_mail, email_verification_send
from accounts.signals import account_created
from core.error_codes import CoreErrorCode
from core.tenancy import account_context
from core.text import CONTROL_CHARACTERS_MESSAGE, has_control_characters


def _clean_email(email: str) -> str:
    email = (email or "").strip().lower()
    try:
        validate_email(email)
    except ValidationError as exc:
        raise AccountError(CoreErrorCode.INVALID_EMAIL, "Enter a valid email address.", field="email") from exc
    return email


def _unique_slug(name: str) -> str:
    base = slugify(name)[:50] or "team"
    slug, n = base, 1
    while Account.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


@transaction.atomic
def account_create(
    *,
    name: str,
    owner: User,
    slug: str | None = None,
    initial_credits: int | None = None,
    created_by: User | None = None,
) -> Account:
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
            raise AccountError(
                AccountErrorCode.INVALID_SLUG, "The slug may use letters, digits and hyphens only.", field="slug"
            )
        if Account.objects.filter(slug=slug).exists():
            raise AccountError(
                AccountErrorCode.DUPLICATE_SLUG, f"The slug “{slug}” is taken; choose another.", field="slug"
            )
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
        raise AccountError(
            AccountErrorCode.TOO_MANY_TEAMS,
            f"A person can create at most {limit} teams a day. Try again "
            "tomorrow, or ask to be invited to an existing team.",
            status=429,
        )
    grant = person.email_verified_at is not None and person.starting_credits_granted_at is None
    account = account_create(
        name=name, owner=person, initial_credits=settings.SIGNUP_CREDITS if grant else 0, created_by=person
    )
    if grant:
        person.starting_credits_granted_at = timezone.now()
        person.save(update_fields=["starting_credits_granted_at"])
    return account


def starting_credits_went_to(*, user: User) -> Account | None:
    """The team this person's starting credits went to, if any (what a new team's page says)."""
    if user.starting_credits_granted_at is None:
        return None
    return (
        user.signup_account
        if user.signup_account_id
        else Account.objects.filter(created_by=user).order_by("created_at").first()
    )


@transaction.atomic
def user_create(*, email: str, password: str, full_name: str = "") -> User:
    email = _clean_email(email)
    if has_control_characters(full_name):
        raise AccountError(CoreErrorCode.INVALID_NAME, CONTROL_CHARACTERS_MESSAGE, field="full_name")
    if User.objects.filter(email__iexact=email).exists():
        raise AccountError(
            AccountErrorCode.DUPLICATE_EMAIL,
            "An account with this email already exists. Log in instead.",
            field="email",
        )
    try:
        validate_password(password, User(email=email, full_name=full_name))
    except ValidationError as exc:
        raise AccountError(AccountErrorCode.WEAK_PASSWORD, " ".join(exc.messages), field="password") from exc
    try:
        return User.objects.create_user(email=email, password=password, full_name=full_name.strip())
    except IntegrityError as exc:
        raise AccountError(
            AccountErrorCode.DUPLICATE_EMAIL,
            "An account with this email already exists. Log in instead.",
            field="email",
        ) from exc


def user_is_unclaimed(user: User) -> bool:
    """Nobody ever signed in as this user and it has no password: it was made for its
    address by an identity provider (SCIM) or an operator, and the address's owner has not
    taken it up yet. Such an address does not block its owner's sign-up (signup_claim_send)."""
    return user.last_login is None and not user.has_usable_password() and not user.sso_identities.exists()


@transaction.atomic
def signup_claim_send(*, email: str, site_url: str) -> bool:
    """Sign-up with the address of an unclaimed user: instead of "this address exists", the
    address gets a link to set the user's password (Django's reset token: it works once, and
    opening it proves the address). The memberships made for them stay; no team of their own
    is made (like an invitation's sign-up). Returns whether the link was sent."""
    user = User.objects.filter(email__iexact=_clean_email(email), is_active=True).first()
    if user is None or not user_is_unclaimed(user):
        return False
    link = site_url.rstrip("/") + reverse(
        "accounts:password_reset_confirm",
        args=[urlsafe_base64_encode(force_bytes(user.pk)), default_token_generator.make_token(user)],
    )
    _send_mail(to=user.email, template="accounts/email/claim_login.txt", context={"user": user, "link": link})
    return True


@transaction.atomic
def signup(
    *,
    email: str,
    password: str,
    account_name: str,
    full_name: str = "",
    email_verified: bool = False,
    site_url: str = "",
) -> tuple[User, Account]:
    """Sign-up: the user and their own account, as its owner.

    Nothing else: an invitation to the same address is not accepted here (signing up does
    not prove the address), and the starting credits wait until the address is verified
    (the link emailed to it, or an invitation link). `email_verified` is for operators
    (the demo account), who vouch for the address themselves.
    """
    user = user_create(email=email, password=password, full_name=full_name)
    account = account_create(
        name=account_name or f"{user.get_short_name()}'s team", owner=user, initial_credits=0, created_by=user
    )
    user.signup_account = account
    user.last_account = account
    user.save(update_fields=["signup_account", "last_account"])
    if email_verified:
        _email_mark_verified(user)
    elif site_url:
        email_verification_send(user=user, site_url=site_url)
    return user, account


def user_last_account_set(*, user: User, account_id: int) -> None:
    """Remember the account the person works in: the next login lands there."""
    if user.last_account_id != account_id:
        User.objects.filter(pk=user.pk).update(last_account_id=account_id)
        user.last_account_id = account_id
