from rest_framework.permissions import BasePermission


class HasAccount(BasePermission):
    """The request acts for an account (API key or a member's session)."""

    message = "Authenticate with an API key (Authorization: Bearer gw_…) or sign in."

    def has_permission(self, request, view):
        # DRF's request reads through to Django's, where AccountContextMiddleware put the account.
        return getattr(request, "account", None) is not None and (
            request.auth is not None or request.user.is_authenticated)
