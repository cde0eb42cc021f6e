"""Email verification: the signed token, the mail and marking the address verified."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.core.mail import send_mail
from django.db import transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.models import Account, User
from accounts.signals import signup_email_verified
from core.tenancy import account_context

VERIFY_SALT = "accounts.verify-email"


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
    _send_mail(
        to=user.email,
        template="accounts/email/verify_email.txt",
        context={
            "user": user,
            "link": link,
            "days": settings.EMAIL_VERIFICATION_MAX_AGE_DAYS,
            "credits": settings.SIGNUP_CREDITS,
        },
    )


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
    if (
        user.signup_account_id
        and user.starting_credits_granted_at is None
        and not Account.objects.filter(pk=user.signup_account_id, deleted_at__isnull=False).exists()
    ):
        user.starting_credits_granted_at = user.email_verified_at
        fields.append("starting_credits_granted_at")
        with account_context(account_id=user.signup_account_id):
            signup_email_verified.send(
                sender=User, account=user.signup_account, initial_credits=settings.SIGNUP_CREDITS
            )
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
    except signing.SignatureExpired as exc:
        raise AccountError(
            AccountErrorCode.LINK_EXPIRED,
            "This verification link has expired. Log in and ask for a new one.",
            status=410,
        ) from exc
    except signing.BadSignature as exc:
        raise AccountError(
            AccountErrorCode.LINK_INVALID,
            "This verification link is not valid. Copy the whole link from the email, or log in and ask for a new one.",
            status=404,
        ) from exc
    user = User.objects.filter(pk=data.get("u"), email__iexact=data.get("e", "")).first()
    if user is None:
        raise AccountError(
            AccountErrorCode.LINK_INVALID,
            "This verification link is not valid: it was made for another address.",
            status=404,
        )
    return user, _email_mark_verified(user)
