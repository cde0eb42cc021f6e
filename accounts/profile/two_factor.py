"""Two-factor sign-in: a TOTP authenticator app (django-otp's TOTPDevice) and ten one-time
recovery codes (its StaticDevice), checked on a second step of the password sign-in.

Only the password sign-in (accounts.views.LoginView) asks for a code: a single-sign-on
session is verified by the identity provider, which runs its own second factor, and API
keys are not people. Code attempts are limited per person and per IP (accounts.ratelimit);
django-otp's own per-device back-off is off (settings.OTP_*_THROTTLE_FACTOR = 0) so that one
rule, with one message, decides.
"""

from __future__ import annotations

import secrets
import time

import segno
from django.conf import settings
from django.db import transaction
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import ratelimit
from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.models import User
from accounts.profile.services import _check_password, user_audit_record
from core.error_codes import CoreErrorCode

RECOVERY_CODE_COUNT = 10
_RECOVERY_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i to misread
TOTP_NAME = "Authenticator app"
RECOVERY_NAME = "Recovery codes"
WRONG_CODE = "That code is not right. Type the 6 digits your app shows now, or one of your recovery codes."


def two_factor_enabled(user: User) -> bool:
    return TOTPDevice.objects.filter(user=user, confirmed=True).exists()


def totp_pending(user: User) -> TOTPDevice | None:
    """The authenticator being set up (shown, not yet confirmed with a code)."""
    return TOTPDevice.objects.filter(user=user, confirmed=False).first()


def totp_secret(device: TOTPDevice) -> str:
    """The base32 secret a person types into an app that cannot scan the QR code."""
    from base64 import b32encode

    return b32encode(device.bin_key).decode()


def totp_qr_svg(device: TOTPDevice) -> str:
    """The otpauth:// URL as an inline SVG (drawn here: no request leaves the page)."""
    return segno.make(device.config_url, error="m").svg_inline(scale=4, dark="#111", light="#fff")


def _limits(request, user: User) -> list[ratelimit.Limit]:
    return [
        ratelimit.Limit("2fa-user", str(user.pk), settings.TWO_FACTOR_FAILURES_PER_USER),
        ratelimit.Limit("2fa-ip", ratelimit.client_ip(request), settings.TWO_FACTOR_FAILURES_PER_IP),
    ]


def _normalise(code: str) -> str:
    return "".join((code or "").split()).replace("-", "").lower()


def _totp_match(user: User, code: str, *, confirmed: bool = True) -> TOTPDevice | None:
    device = TOTPDevice.objects.select_for_update().filter(user=user, confirmed=confirmed).first()
    if device is None or not (code.isdigit() and len(code) == device.digits):
        return None
    return device if device.verify_token(code) else None


def _recovery_match(user: User, code: str) -> StaticDevice | None:
    device = StaticDevice.objects.select_for_update().filter(user=user, confirmed=True).first()
    if device is None or not code:
        return None
    return device if device.verify_token(code) else None  # a used code is deleted: it works once


def _code_check(request, user: User, code: str, *, recovery: bool = True, confirmed: bool = True):
    """The device that accepts `code`, or AccountError: rate-limited (429) past the limits,
    the right code included; a wrong code counts."""
    limits = _limits(request, user)
    wait = ratelimit.wait_for(limits)
    if wait:
        raise AccountError(CoreErrorCode.RATE_LIMITED, ratelimit.too_many_message(wait), status=429, field="code")
    code = _normalise(code)
    device = _totp_match(user, code, confirmed=confirmed) or (_recovery_match(user, code) if recovery else None)
    if device is None:
        for limit in limits:
            limit.hit()
        raise AccountError(AccountErrorCode.INVALID_CODE, WRONG_CODE, field="code")
    limits[0].clear()
    return device


@transaction.atomic
def two_factor_verify(*, request, user: User, code: str):
    """The sign-in's second step: the device that accepted the code (an authenticator code,
    or a recovery code, which is used up)."""
    return _code_check(request, user, code)


@transaction.atomic
def totp_setup_start(*, user: User) -> TOTPDevice:
    """A new secret to scan (any earlier unconfirmed one is thrown away)."""
    if two_factor_enabled(user):
        raise AccountError(
            AccountErrorCode.TWO_FACTOR_ON,
            "Two-factor sign-in is already on. Turn it off first to move it to another app.",
        )
    TOTPDevice.objects.filter(user=user, confirmed=False).delete()
    return TOTPDevice.objects.create(user=user, name=TOTP_NAME, confirmed=False)


def _recovery_codes_make(user: User) -> list[str]:
    StaticDevice.objects.filter(user=user).delete()
    device = StaticDevice.objects.create(user=user, name=RECOVERY_NAME, confirmed=True)
    codes = ["".join(secrets.choice(_RECOVERY_ALPHABET) for _ in range(10)) for _ in range(RECOVERY_CODE_COUNT)]
    device.token_set.bulk_create([device.token_set.model(device=device, token=c) for c in codes])
    return [f"{c[:5]}-{c[5:]}" for c in codes]


@transaction.atomic
def totp_setup_confirm(*, request, user: User, code: str) -> list[str]:
    """Turn two-factor sign-in on once the app shows the right code; returns the ten new
    recovery codes (shown once: only their use is stored)."""
    if two_factor_enabled(user):
        raise AccountError(AccountErrorCode.TWO_FACTOR_ON, "Two-factor sign-in is already on.")
    if totp_pending(user) is None:
        raise AccountError(
            AccountErrorCode.TWO_FACTOR_OFF, "Start the set-up again: no authenticator is waiting for a code."
        )
    device = _code_check(request, user, code, recovery=False, confirmed=False)
    device.confirmed = True
    device.save(update_fields=["confirmed"])
    codes = _recovery_codes_make(user)
    user_audit_record(user=user, action="user.two_factor_enable")
    return codes


@transaction.atomic
def recovery_codes_renew(*, request, user: User, code: str) -> list[str]:
    """Ten new recovery codes (the old ones stop working); needs a current code."""
    if not two_factor_enabled(user):
        raise AccountError(AccountErrorCode.TWO_FACTOR_OFF, "Two-factor sign-in is off: there are no recovery codes.")
    _code_check(request, user, code)
    codes = _recovery_codes_make(user)
    user_audit_record(user=user, action="user.recovery_codes")
    return codes


@transaction.atomic
def two_factor_disable(*, request, user: User, code: str = "", password: str = "") -> None:
    """Turn two-factor sign-in off: with a code (app or recovery), or the password."""
    if not two_factor_enabled(user):
        raise AccountError(AccountErrorCode.TWO_FACTOR_OFF, "Two-factor sign-in is already off.")
    if password:
        _check_password(user, password, field="password")
    elif code:
        _code_check(request, user, code)
    else:
        raise AccountError(
            CoreErrorCode.BAD_REQUEST,
            "Type a code from your app (or a recovery code), or your password, to turn two-factor sign-in off.",
            field="code",
        )
    TOTPDevice.objects.filter(user=user).delete()
    StaticDevice.objects.filter(user=user).delete()
    user_audit_record(user=user, action="user.two_factor_disable")


@transaction.atomic
def two_factor_reset(*, user: User) -> bool:
    """An operator turns a person's two-factor sign-in off (lost phone and recovery codes),
    audited as the system. Returns whether it was on."""
    was_on = two_factor_enabled(user)
    TOTPDevice.objects.filter(user=user).delete()
    StaticDevice.objects.filter(user=user).delete()
    if was_on:
        user_audit_record(user=user, action="user.two_factor_disable", detail={"by": "operator"}, actor=None)
    return was_on


# --- the sign-in's second step: who passed the password, waiting for a code ------------------

PENDING_KEY = "two_factor_pending"
PENDING_SECONDS = 300


def login_pending_set(request, *, user: User, backend: str, next_url: str) -> None:
    """Remember, in the not-yet-signed-in session, who gave the right password."""
    request.session[PENDING_KEY] = {
        "user_id": user.pk,
        "backend": backend,
        "next": next_url,
        "at": int(time.time()),
        "hash": user.get_session_auth_hash(),
    }


def login_pending_user(request) -> tuple[User, dict] | None:
    """The person waiting for their code, if they passed the password in the last five
    minutes and nothing changed since (a new password, another session ended theirs)."""
    pending = request.session.get(PENDING_KEY)
    if not pending or time.time() - pending.get("at", 0) > PENDING_SECONDS:
        return None
    user = User.objects.filter(pk=pending.get("user_id"), is_active=True).first()
    if user is None or user.get_session_auth_hash() != pending.get("hash"):
        return None
    return user, pending


def login_pending_clear(request) -> None:
    request.session.pop(PENDING_KEY, None)


def session_mark_verified(request, device) -> None:
    """Record, in the signed-in session, the device that passed the second step (django-otp's
    session key, so `django_otp` helpers see the session as verified)."""
    request.session[DEVICE_ID_SESSION_KEY] = device.persistent_id
