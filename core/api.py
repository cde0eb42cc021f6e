"""The API platform, set up once for every endpoint: the contract's JSON errors,
pagination, throttling and server-sent event streams. The base every API view inherits is
core.views.AccountAPIView (DRF imports this module while it defines its own APIView, so
this module cannot import APIView)."""

from __future__ import annotations

import base64
import json
import logging
from urllib import parse

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, transaction
from django.http import Http404, StreamingHttpResponse
from redis.exceptions import RedisError
from rest_framework import exceptions, pagination, parsers, renderers, throttling
from rest_framework.response import Response

from core.errors import SERVER_ERROR_MESSAGE, GroundworkError, as_groundwork_error, error_body
from core.tenancy import current_context

logger = logging.getLogger("groundwork.api")

API_PREFIXES = ("/api/", "/v1/")

# One table: DRF exception class -> the contract's error code.
_CODES: list[tuple[type[Exception], str]] = [
    (exceptions.ParseError, "malformed_request"),
    (exceptions.ValidationError, "invalid"),
    (exceptions.AuthenticationFailed, "invalid_api_key"),
    (exceptions.NotAuthenticated, "unauthenticated"),
    (exceptions.PermissionDenied, "permission_denied"),
    (exceptions.NotFound, "not_found"),
    (exceptions.MethodNotAllowed, "method_not_allowed"),
    (exceptions.NotAcceptable, "not_acceptable"),
    (exceptions.UnsupportedMediaType, "unsupported_media_type"),
    (exceptions.Throttled, "rate_limited"),
]

STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    402: "insufficient_credits",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    500: "server_error",
    502: "provider_unavailable",
    503: "unavailable",
}
STATUS_MESSAGES = {
    404: "Nothing exists at this address.",
    405: "This method is not allowed here.",
    413: "The request body is too large.",
    500: SERVER_ERROR_MESSAGE,
}


def rollback_request_transaction() -> None:
    """A failed request must not commit half its writes: roll back the transaction that the
    request's account context opened (and only that one)."""
    if current_context().is_active and transaction.get_connection().in_atomic_block:
        transaction.set_rollback(True)


def _flatten(detail, prefix="") -> list[str]:
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            label = "" if key == "non_field_errors" else f"{key}: "
            out += _flatten(value, prefix + label)
        return out
    if isinstance(detail, list):
        return [m for item in detail for m in _flatten(item, prefix)]
    return [f"{prefix}{detail}"]


def exception_handler(exc, context):
    """Every error under /api/ and /v1/ as {"error": {"code", "message"}}; never a traceback."""
    rollback_request_transaction()
    request = context.get("request")
    if wants_event_stream(request):
        # Errors before a stream starts are JSON with their own status, like every API error.
        request.accepted_renderer, request.accepted_media_type = renderers.JSONRenderer(), "application/json"
    if isinstance(exc, GroundworkError):
        # `details`: what a failure adds for its caller (a chat turn's stored question).
        return Response(
            error_body(exc.code, exc.message, field=exc.field, **getattr(exc, "details", {})), status=exc.status
        )
    if isinstance(exc, DataError):
        # A value PostgreSQL cannot hold (a number past bigint, a NUL character) that
        # validation let through: the client's input, not our failure.
        exc = exceptions.ValidationError("A value in the request is out of range or not storable.")
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("Not found.")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.APIException):
        code = next((c for cls, c in _CODES if isinstance(exc, cls)), STATUS_CODES.get(exc.status_code, "error"))
        if isinstance(exc, exceptions.ValidationError):
            message = " ".join(_flatten(exc.detail)) or "The request is invalid."
            fields = exc.detail if isinstance(exc.detail, dict) else None
            # `param`: the one field at fault, where OpenAI's SDKs look for it (exc.param).
            param = next(iter(fields)) if fields and len(fields) == 1 and "non_field_errors" not in fields else None
            body = error_body(code, message, fields=fields, param=param)
        elif isinstance(exc, exceptions.ParseError):
            body = error_body(code, f"The request body could not be parsed: {exc.detail}")
        else:
            body = error_body(code, str(exc.detail))
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
        return Response(body, status=exc.status_code, headers=headers)
    error = as_groundwork_error(exc)  # logs the traceback
    return Response(error_body(error.code, error.message), status=error.status)


MAX_JSON_DEPTH = 32


def _check_json(value) -> None:
    """Walks a parsed body without recursion: nested at most MAX_JSON_DEPTH deep, and no NUL
    character in any string or key (PostgreSQL text cannot hold one)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise exceptions.ParseError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep.")
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                item = item.values()
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str) and "\x00" in item:
            raise exceptions.ParseError("a string contains a NUL character (\\u0000), which no field accepts.")


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, bounded: deeply nested JSON is a 400, not a RecursionError."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep.") from None
        _check_json(data)
        return data


class CursorPagination(pagination.CursorPagination):
    """Stable pages, newest first: `{"results": [...], "next": url|null, "previous": url|null}`.

    A cursor is the client's to send back, so one that was not made here (not base64, a
    position that is not a value of the ordering field) is a 400 `bad_request`, never a
    database error: DRF takes any position and hands it to the query."""

    ordering = "-created_at"
    page_size_query_param = "page_size"
    max_page_size = 200
    INVALID = "That page link is not valid (it was changed or cut). Start again from the first page."

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is not None and not self._well_formed(encoded):
            raise exceptions.ParseError(self.INVALID)
        try:
            cursor = super().decode_cursor(request)
        except exceptions.NotFound:
            raise exceptions.ParseError(self.INVALID) from None
        return cursor

    @staticmethod
    def _well_formed(encoded: str) -> bool:
        """Strict base64 of a query string of our keys only (DRF skips what is not base64,
        so "%%%" or any word would read as the first page)."""
        try:
            text = base64.b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
        except (ValueError, UnicodeError):
            return False
        keys = parse.parse_qs(text, keep_blank_values=True)
        return bool(keys) and set(keys) <= {"o", "r", "p"}

    def paginate_queryset(self, queryset, request, view=None):
        cursor = self.decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            self._check_position(queryset, cursor.position)
        return super().paginate_queryset(queryset, request, view)

    def _check_position(self, queryset, position: str) -> None:
        ordering = self.ordering if isinstance(self.ordering, str) else self.ordering[0]
        field = queryset.model._meta.get_field(ordering.lstrip("-"))
        try:
            value = field.to_python(position)
        except (DjangoValidationError, TypeError, ValueError, OverflowError):
            raise exceptions.ParseError(self.INVALID) from None
        if value is None:
            raise exceptions.ParseError(self.INVALID)


class AccountRateThrottle(throttling.SimpleRateThrottle):
    """Requests per account (per client address when there is none)."""

    scope = "account"

    def get_rate(self):
        # Read at request time (not import time), so a settings change takes effect.
        from rest_framework.settings import api_settings

        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def allow_request(self, request, view):
        try:
            return super().allow_request(request, view)
        except RedisError as exc:  # Redis unreachable, through Django's cache
            # Fail open: requests are paid for and scoped in PostgreSQL; while Redis is
            # unreachable only this limit is lost (docs/operations/reliability.md).
            logger.warning("API rate limit unavailable (%s): request allowed", exc)
            return True

    def get_cache_key(self, request, view):
        account = getattr(request, "account", None)  # DRF's request reads through to Django's
        ident = f"account-{account.pk}" if account is not None else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


class _AccountOnly:
    """What AccountRateThrottle reads of a request, for a surface that has no DRF request."""

    def __init__(self, account):
        self.account = account


def account_rate_check(*, account) -> None:
    """The API's per-account request limit (AccountRateThrottle, API_RATE_LIMIT) for a surface
    outside DRF (MCP's tools): the same counter as REST, so MCP and REST share the account's
    rate. Raises DRF's Throttled (429 `rate_limited`, with the wait) past it."""
    throttle = AccountRateThrottle()
    if not throttle.allow_request(_AccountOnly(account), None):
        raise exceptions.Throttled(throttle.wait())


class EventStreamRenderer(renderers.BaseRenderer):
    """Lets a streaming endpoint accept `Accept: text/event-stream`. Streams are sent by
    `streaming_response`; this renders what is not streamed (an error before the stream
    starts) as one event."""

    media_type = "text/event-stream"
    format = "sse"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return f"data: {json.dumps(data)}\n\n".encode()


def wants_event_stream(request) -> bool:
    return getattr(request, "accepted_renderer", None) is not None and request.accepted_renderer.format == "sse"


def streaming_response(events) -> StreamingHttpResponse:
    """Server-sent events from an (async) iterator of ready-made `data: …` strings, each
    sent as it is produced (under ASGI an async iterator is streamed, not collected)."""
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
