"""Sets the account context for each request, from the API key or the session."""

from __future__ import annotations

import contextlib

from asgiref.sync import async_to_sync, iscoroutinefunction
from django.core.exceptions import PermissionDenied
from django.core.handlers.exception import response_for_exception
from django.http import Http404

from accounts.resolution import Resolution, bearer_token, resolve_api_key, resolve_session
from accounts.services import api_key_touch
from accounts.sso.session import sso_required_error
from accounts.sso.views import sso_required_response
from core.api import rollback_request_transaction
from core.middleware import api_error_response, is_api_path
from core.tenancy import account_context, current_context, dangerously_bypass_tenancy


def wants_account_transaction(view_func) -> bool:
    """Whether the view runs in the request's transaction: False for views that declare
    `account_transaction = False` (core.views.AccountAPIView). Read from the view Django is about
    to call: DRF's as_view() sets `cls`, Django's `view_class`; a function view (and its
    decorators, which copy attributes) may carry the attribute itself."""
    view = getattr(view_func, "cls", None) or getattr(view_func, "view_class", None) or view_func
    return getattr(view, "account_transaction", True)


def request_account_context(request):
    """The request's account context (one transaction, RLS scoped to its account), or nothing
    if it has no account or is already inside one. For a page rendered where no view of ours
    runs: the 404 page of an address no URL matches (its header reads the account's balance)."""
    account = getattr(request, "account", None)
    if account is None or current_context().is_active:
        return contextlib.nullcontext()
    return account_context(
        account, user=getattr(request, "user", None) if request.api_key is None else None, api_key=request.api_key
    )


class AccountContextMiddleware:
    """Runs each request in its account's context (one transaction, RLS scoped to it).

    `__call__` resolves the account (API key or session); `process_view`, which sees the view
    Django is about to call, opens the transaction around it unless the view declares
    `account_transaction = False` (streaming and long views: a chat turn opens short account
    contexts of its own, so no transaction holds the credit row lock across a model call).

    Staff in /admin/ work through the audited bypass instead; anonymous requests get no
    context, so every tenant table reads as empty to them.

    NOTE: for a view in the transaction, `process_view` calls the view itself and returns its
    response, so a middleware listed after this one must not need a `process_view` of its own
    (none does: audit's has none), and ATOMIC_REQUESTS stays off (this is the request's
    transaction).
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
        request._account_resolution = None
        if request.path.startswith("/admin/") and request.user.is_authenticated and request.user.is_staff:
            with dangerously_bypass_tenancy(reason=f"admin {request.user.email} {request.method} {request.path}"):
                return self.get_response(request)
        request.sso_required_account = resolution.sso_required_account
        # The API's and /v1's answer for it (core.permissions.HasAccount): 403 `sso_required`.
        request.account_refusal = (
            sso_required_error(resolution.sso_required_account) if resolution.sso_required_account is not None else None
        )
        if resolution.sso_required_account is not None and (refusal := sso_required_response(request)) is not None:
            return refusal
        if resolution.account is None:
            return self.get_response(request)
        request._account_resolution = resolution
        response = self.get_response(request)
        if request._account_resolution is not None and resolution.api_key is not None:
            # No view ran (no URL matched): the key was still used.
            with account_context(resolution.account):
                api_key_touch(key=resolution.api_key)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        resolution, request._account_resolution = getattr(request, "_account_resolution", None), None
        if resolution is None:
            return None
        if not wants_account_transaction(view_func):
            if resolution.api_key is not None:
                with account_context(resolution.account):
                    api_key_touch(key=resolution.api_key)
            return None  # Django calls the view, outside any transaction
        with account_context(resolution.account, user=resolution.user, api_key=resolution.api_key):
            if resolution.api_key is not None:
                api_key_touch(key=resolution.api_key)
            return self._respond(request, view_func, view_args, view_kwargs)

    def _respond(self, request, view_func, view_args, view_kwargs):
        """The view's response, made as Django's handler would make it (exception middleware,
        the error pages, deferred rendering), but all inside the request's transaction: the
        context is entered and left in this one frame (under ASGI each middleware step runs in
        a copy of the context variables, so a context opened here could not be closed later)."""
        callback = async_to_sync(view_func) if iscoroutinefunction(view_func) else view_func
        try:
            response = callback(request, *view_args, **view_kwargs)
            if response is None:
                raise ValueError(
                    f"The view {getattr(view_func, '__qualname__', view_func)} didn't return an "
                    "HttpResponse object. It returned None instead."
                )
            if hasattr(response, "render") and callable(response.render):
                # A template response reads the account's rows as it renders: render it here.
                response = response.render()
        except Exception as exc:
            self.process_exception(request, exc)
            api_response = api_error_response(request, exc)
            response = api_response if api_response is not None else response_for_exception(request, exc)
        return response

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
