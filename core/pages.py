"""The base of every dashboard page that acts for the session's account, as
core.views.AccountAPIView is the API's: who may open the page, the thing it shows (or the
404 page), and the round trip of its forms (post, then redirect; or the page again, saying
why).

Core imports no app, so the permission table is not read here: a page names its check, a
function of the request that raises the 403 page (accounts.permissions.page_check(Action.…)),
as an API view names its `permission_classes`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from core.error_codes import CoreErrorCode
from core.errors import GroundworkError, NotFound

PageCheck = Callable[[HttpRequest], None]


def request_account(request: HttpRequest):
    """The account the session acts for (accounts.middleware resolved it: the chosen
    membership, with the single sign-on rules applied), or the 404 page without one."""
    account = getattr(request, "account", None)
    if account is None:
        raise Http404
    return account


def account_page(check: PageCheck | None = None, *, methods: tuple[str, ...] | None = None):
    """A dashboard view of the session's account: signed in (else the login page), one of
    `methods` (else 405), an account (else 404), then `check(request)`, which raises the 403
    page for a member who may not. A check that depends on the object (own-only grants) is
    the view's, once it has the object."""

    def decorate(view):
        @wraps(view)
        def page(request, *args, **kwargs):
            request_account(request)
            if check is not None:
                check(request)
            return view(request, *args, **kwargs)

        return login_required(require_http_methods(methods)(page) if methods else page)

    return decorate


def page_found(access: Callable[..., Any], **kwargs):
    """`access(**kwargs)` (a `<thing>_access_by_id` selector), or the 404 page with its
    message: the same for a missing id and another account's."""
    try:
        return access(**kwargs)
    except NotFound as exc:
        raise Http404(exc.message) from exc


def _refusal_page(exc: GroundworkError) -> None:
    """A refusal by role is the 403 page, saying why."""
    if exc.code == CoreErrorCode.FORBIDDEN:
        raise PermissionDenied(exc.message) from exc


def page_post(
    request: HttpRequest,
    act: Callable[[], Any],
    *,
    to,
    success: str | Callable[[Any], str] | None = None,
    told: type[GroundworkError] | tuple[type[GroundworkError], ...] = GroundworkError,
    refusal_pages: bool = False,
    level: int = messages.SUCCESS,
) -> HttpResponse:
    """A button or form whose refusal is told on the next page (post/redirect/get): `act()`;
    a `told` error becomes the error message, else `success` (a text, or made from what `act`
    returned; None: no message) the message of `level`; then the redirect to `to` (what
    `redirect()` takes). With `refusal_pages`, a missing thing (404) is the 404 page and a
    refusal by role the 403 page."""
    try:
        done = act()
    except told as exc:
        if refusal_pages:
            if exc.status == 404:
                raise Http404 from exc
            _refusal_page(exc)
        messages.error(request, exc.message)
    else:
        if success is not None:
            messages.add_message(request, level, success(done) if callable(success) else success)
    return redirect(to)


def form_round_trip(
    request: HttpRequest,
    form,
    *,
    act: Callable[[dict], Any],
    to,
    success: str | Callable[[Any], str],
    rerender: Callable[[Any, int], HttpResponse],
) -> HttpResponse:
    """A form posted to its page: `form` is bound to the POST. Invalid, or refused by
    `act(form.cleaned_data)` with a domain error (put on its field, else on the form), the
    page again through `rerender(form, status)`: 400 (409 or 429 where the error says so),
    the input kept, nothing changed. A refusal by role is the 403 page. Else `success` (a
    text, or made from what `act` returned) as a message, and the redirect to `to`."""
    if not form.is_valid():
        return rerender(form, 400)
    try:
        done = act(form.cleaned_data)
    except GroundworkError as exc:
        _refusal_page(exc)
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return rerender(form, exc.status if exc.status in (400, 409, 429) else 400)
    messages.success(request, success(done) if callable(success) else success)
    return redirect(to)
