"""DRF authentication: the account was resolved by AccountContextMiddleware; these classes
turn that into DRF's (user, auth) and the contract's 401s."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from rest_framework import authentication, exceptions

# What a request with an unknown or revoked key is told (REST, /v1 and MCP: integrations.mcp_http).
INVALID_API_KEY_MESSAGE = "The API key is unknown or has been revoked. Create a new key in Team settings."


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gw_…`: the key names its account."""

    keyword = "Bearer"

    def authenticate(self, request):
        raw_request = request._request
        if getattr(raw_request, "bad_api_key", False):
            raise exceptions.AuthenticationFailed(INVALID_API_KEY_MESSAGE)
        key = getattr(raw_request, "api_key", None)
        if key is None:
            return None
        # The key, not the person who made it, is the caller: no user rights come with it.
        return (AnonymousUser(), key)

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class AccountSessionAuthentication(authentication.SessionAuthentication):
    """The dashboard session (with CSRF), for signed-in members of an account."""

    def authenticate(self, request):
        raw_request = request._request
        user = getattr(raw_request, "user", None)
        if not user or not user.is_active or not user.is_authenticated:
            return None
        if getattr(raw_request, "account", None) is None:
            return None
        self.enforce_csrf(request)
        return (user, None)
