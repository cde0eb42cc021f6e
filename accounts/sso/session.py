"""How a session signed in: password (the login form) or single sign-on (the callback).

Read by the account resolution (an account that requires SSO is no access to a password
session) and by anything that treats the two differently (two-factor: SSO relies on the
provider's own MFA)."""
from __future__ import annotations

from django.contrib.auth import BACKEND_SESSION_KEY

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

    return (account.staff_password_2fa and (user.is_staff or user.is_superuser) and session is not None
            and bool(session.get(DEVICE_ID_SESSION_KEY)))
