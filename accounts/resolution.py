"""Which account a request or websocket is acting for: from the API key or the session's
chosen membership, never from a client-supplied field. Shared by HTTP and websockets."""

from __future__ import annotations

from dataclasses import dataclass

from accounts.models import Account, ApiKey, Membership, User
from accounts.selectors import api_key_for_secret, membership_list_for_user
from accounts.sso.session import session_passes_sso, sso_shuts_out

SESSION_ACCOUNT_KEY = "account_id"


@dataclass
class Resolution:
    account: Account | None = None
    user: User | None = None
    membership: Membership | None = None
    api_key: ApiKey | None = None
    memberships: list[Membership] | None = None
    bad_api_key: bool = False
    # The session's account requires single sign-on and the session signed in otherwise: no
    # account (no access), and the pages say so (accounts/sso/views.py, sso_required_response).
    sso_required_account: Account | None = None


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or ""


def resolve_api_key(token: str) -> Resolution:
    key = api_key_for_secret(raw=token)
    if key is None:
        return Resolution(bad_api_key=True)
    return Resolution(account=key.account, api_key=key)


def resolve_session(user: User, session) -> Resolution:
    """The session's chosen account if the user is still a member, else the one they used
    last, else their first one; none (and `sso_required_account`) if that account requires
    single sign-on and the session signed in with a password. API keys are not sessions."""
    if not user or not user.is_authenticated or not user.is_active:
        return Resolution()
    memberships = membership_list_for_user(user=user)
    if not memberships:
        return Resolution(user=user, memberships=[])
    chosen_id = session.get(SESSION_ACCOUNT_KEY) if session is not None else None
    membership = next((m for m in memberships if m.account_id == chosen_id), None) or next(
        (m for m in memberships if m.account_id == user.last_account_id), memberships[0]
    )
    if sso_shuts_out(
        membership.account, by_sso=session_passes_sso(user=user, account=membership.account, session=session)
    ):
        return Resolution(user=user, memberships=memberships, sso_required_account=membership.account)
    return Resolution(account=membership.account, user=user, membership=membership, memberships=memberships)
