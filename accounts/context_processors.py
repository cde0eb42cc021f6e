from django.utils.functional import SimpleLazyObject

from accounts.permissions import Abilities
from accounts.selectors import invitation_list_for_user
from accounts.sso.session import session_passes_sso, sso_shuts_out


def current_account(request):
    user = getattr(request, "user", None)
    account = getattr(request, "account", None)
    signed_in = bool(user and user.is_authenticated)
    memberships = getattr(request, "memberships", [])
    session = getattr(request, "session", None)
    return {
        "current_account": account,
        "current_membership": getattr(request, "membership", None),
        "memberships": memberships,
        # The switcher shows these teams as "sign in with SSO to open": this session may not.
        "sso_locked_account_ids": {
            m.account_id
            for m in memberships
            if sso_shuts_out(m.account, by_sso=session_passes_sso(user=user, account=m.account, session=session))
        },
        # `{% if may.document_upload %}`: what the session's member may do (accounts/permissions.py).
        "may": Abilities(request),
        # Read only by the pages that show them (no query on the others).
        "pending_invitations": SimpleLazyObject(
            lambda: (
                invitation_list_for_user(user=user) if signed_in and getattr(request, "api_key", None) is None else []
            )
        ),
        # The team made at sign-up waits for its starting credits until the address is verified.
        "awaiting_verification": bool(
            signed_in
            and user.email_verified_at is None
            and account is not None
            and user.signup_account_id == account.pk
        ),
    }
