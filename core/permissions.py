from rest_framework.permissions import BasePermission


class HasAccount(BasePermission):
    """The request acts for an account (API key or a member's session). A session refused its
    account by a rule of the accounts app (a team that requires single sign-on, for a password
    session) answers that rule's error, which the middleware put on the request as
    `account_refusal`, rather than a 401 that would tell a signed-in person to sign in."""

    message = "Authenticate with an API key (Authorization: Bearer gw_…) or sign in."

    def has_permission(self, request, view):
        refusal = getattr(request, "account_refusal", None)
        if refusal is not None and getattr(request, "account", None) is None:
            raise refusal
        # DRF's request reads through to Django's, where AccountContextMiddleware put the account.
        return getattr(request, "account", None) is not None and (
            request.auth is not None or request.user.is_authenticated
        )
