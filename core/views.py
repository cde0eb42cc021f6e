"""The base every API view inherits (core.api holds the rest of the API platform)."""

from __future__ import annotations

from rest_framework.views import APIView

from core.authentication import AccountSessionAuthentication, ApiKeyAuthentication
from core.permissions import HasAccount


class AccountAPIView(APIView):
    """The base of every view under /api/ and /v1/ (PostHog's TeamAndOrgViewSetMixin): a view
    says only what differs from it.

    - `self.account`: the account the request acts for (the API key's, or the session's
      chosen membership's), as accounts.middleware.AccountContextMiddleware resolved it;
      `self.principal`: who acts, the `ApiKey` or the member's `Membership` (what
      accounts.permissions checks); `self.api_key`, `self.membership` and `self.user` (the
      signed-in person, None for an API key) for the views that need one of them.
    - Authentication: an API key or the dashboard session (`authentication_classes`).
    - Permissions: `HasAccount` (401 without a principal) always first, then the view's own
      `permission_classes`, typically `[accounts.permissions.allows(Action.…)]` (403).
    - `account_transaction`: True runs the view in one transaction with the account context
      set, rolled back on error; False (streaming or long views: a chat turn) runs it outside
      any transaction, and the view opens short account contexts of its own. The middleware
      reads it from the view it is about to call (`process_view`), never from the URL.
    """

    account_transaction = True
    authentication_classes = [ApiKeyAuthentication, AccountSessionAuthentication]
    permission_classes: list = []  # what the view adds to HasAccount

    def get_permissions(self):
        return [HasAccount(), *super().get_permissions()]

    @property
    def account(self):
        return getattr(self.request._request, "account", None)

    @property
    def api_key(self):
        return getattr(self.request._request, "api_key", None)

    @property
    def membership(self):
        # A key is the caller, not the person who made it: no membership comes with it.
        return None if self.api_key is not None else getattr(self.request._request, "membership", None)

    @property
    def principal(self):
        return self.api_key or self.membership

    @property
    def user(self):
        """The signed-in person acting, or None (an API key, or nobody)."""
        user = self.request.user
        return user if self.api_key is None and getattr(user, "is_authenticated", False) else None
