"""How a session signed in: password (the login form) or single sign-on (the callback), and
the one rule of the owner's switch "Members must sign in with SSO" (`sso_shuts_out`).

The rule is asked by every surface that reads a team's data for a person's session: the
account resolution (pages, the REST API and /v1 through the session, the websocket's
handshake), the websocket's re-check before each turn, the team switcher, and the personal
export (which leaves such teams out, and whose download a password session cannot take when it
holds one). API keys are not sessions: they belong to the team and never ask it. MCP takes API
keys only. Also read by anything that treats the two sign-ins differently (two-factor: SSO
relies on the provider's own MFA)."""

from __future__ import annotations

from django.contrib.auth import BACKEND_SESSION_KEY

from accounts.error_codes import SsoErrorCode
from accounts.sso.errors import SsoError

SSO_BACKEND = "accounts.sso.backends.SsoBackend"
SIGNED_IN_WITH_KEY = "signed_in_with"
SIGNED_IN_WITH_SSO = "sso"


def session_mark_sso(session) -> None:
    """Record on the session (after `login(..., backend=SSO_BACKEND)`) that it signed in
    through single sign-on."""
    session[SIGNED_IN_WITH_KEY] = SIGNED_IN_WITH_SSO


def signed_in_with_sso(session) -> bool:
    """Both marks: ours, and the backend Django's `login()` wrote (a password login later in
    the same session rewrites that one, so the session no longer counts as SSO)."""
    if session is None:
        return False
    return session.get(SIGNED_IN_WITH_KEY) == SIGNED_IN_WITH_SSO and session.get(BACKEND_SESSION_KEY) == SSO_BACKEND


def staff_password_session_opens(*, user, account, session) -> bool:
    """Whether a session that did not sign in with SSO may still open an account that requires
    it: a support staff or superuser member's, signed in with their password and two-factor
    code, where the account requires exactly that of its staff (Account.staff_password_2fa)."""
    from django_otp import DEVICE_ID_SESSION_KEY

    return (
        account.staff_password_2fa
        and (user.is_staff or user.is_superuser)
        and session is not None
        and bool(session.get(DEVICE_ID_SESSION_KEY))
    )


def session_passes_sso(*, user, account, session) -> bool:
    """Whether this session counts as signed in through SSO for `account`: it did, or it is a
    staff member's password + two-factor session where the account requires exactly that."""
    return signed_in_with_sso(session) or staff_password_session_opens(user=user, account=account, session=session)


def sso_shuts_out(account, *, by_sso: bool) -> bool:
    """The rule: a team whose members must sign in with SSO is closed to a person's session that
    signed in otherwise (`by_sso`: `signed_in_with_sso(session)`, or what an export recorded of
    the session that asked for it). Not asked for API keys."""
    return bool(account.sso_required) and not by_sso


def sso_required_message(account) -> str:
    return f"{account.name} requires single sign-on: sign in with SSO to open it."


def sso_required_error(account) -> SsoError:
    """The refusal the API gives a password session whose team requires SSO (403 `sso_required`)."""
    return SsoError(SsoErrorCode.SSO_REQUIRED, sso_required_message(account), status=403)
