"""Sets the account context for each request, from the API key or the session."""
from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.urls import Resolver404, resolve

from accounts.resolution import Resolution, bearer_token, resolve_api_key, resolve_session
from accounts.services import api_key_touch
from core.tenancy import account_context, dangerously_bypass_tenancy
from core.api import rollback_request_transaction
from core.middleware import is_api_path


def _wants_request_transaction(request) -> bool:
    """False for views that declare `account_transaction = False`."""
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return True
    view = getattr(match.func, "view_class", None) or match.func
    return getattr(view, "account_transaction", True)


class AccountContextMiddleware:
    """Runs each request in its account's context (one transaction, RLS scoped to it).

    Staff in /admin/ work through the audited bypass instead; anonymous requests get no
    context, so every tenant table reads as empty to them.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        resolution = self._resolve(request)
        request.account = resolution.account
        request.membership = resolution.membership
        request.memberships = resolution.memberships or []
        request.api_key = resolution.api_key
        request.bad_api_key = resolution.bad_api_key
        if request.path.startswith("/admin/") and request.user.is_authenticated and request.user.is_staff:
            with dangerously_bypass_tenancy(reason=f"admin {request.user.email} {request.method} {request.path}"):
                return self.get_response(request)
        if resolution.account is None:
            return self.get_response(request)
        if not _wants_request_transaction(request):
            # Views that call a model (chat) open short account contexts of their own: one
            # transaction around a whole answer would hold the credit row lock meanwhile.
            if resolution.api_key is not None:
                with account_context(resolution.account):
                    api_key_touch(key=resolution.api_key)
            return self.get_response(request)
        with account_context(resolution.account, user=resolution.user, api_key=resolution.api_key):
            if resolution.api_key is not None:
                api_key_touch(key=resolution.api_key)
            return self.get_response(request)

    def process_exception(self, request, exception):
        # The request's transaction must not commit half of a failed view. A 404 or 403 is
        # an answer, not a failure: its page still renders inside the transaction.
        if isinstance(exception, (Http404, PermissionDenied)):
            return None
        rollback_request_transaction()
        return None

    @staticmethod
    def _resolve(request) -> Resolution:
        # An API key authenticates the API and /v1 only (the websocket resolves its own
        # handshake). Dashboard pages act for the session's account and ignore any
        # Authorization header: a page must never mix one account's session with another's key.
        token = bearer_token(request.headers.get("Authorization")) if is_api_path(request.path) else None
        if token is not None:
            # The key is the caller, not the person who made it: no user rights (nor the
            # user's row-level-security view of their memberships) come with it.
            return resolve_api_key(token)
        return resolve_session(request.user, getattr(request, "session", None))
