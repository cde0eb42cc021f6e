"""One error type for the whole product, and its one mapping to every surface.

Every domain error is a `GroundworkError` (or a subclass naming its domain): a stable
`code`, a `message` a person can act on, the HTTP `status` it answers with and, for form
and API validation, the `field` it concerns. The REST API, /v1, the websocket and the SSE
streams all turn an exception into their error shape through `as_groundwork_error()`, so a
code answers with the same status and words everywhere.
"""

from __future__ import annotations

import logging

from core.error_codes import CoreErrorCode

logger = logging.getLogger("groundwork.errors")

SERVER_ERROR_MESSAGE = "Something went wrong on our side. It has been logged; please try again."


def _rebuild(cls, state: dict) -> GroundworkError:
    error = cls.__new__(cls)
    Exception.__init__(error, state.get("message", ""))
    error.__dict__.update(state)
    return error


class GroundworkError(Exception):
    """A failure a person can act on: `code` (stable), `message`, HTTP `status`, `field`."""

    status = 400

    def __init__(self, code: str, message: str, status: int | None = None, field: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self):
        # Crosses process boundaries (the parser sandbox, rq) with every attribute intact,
        # whatever a subclass's constructor looks like.
        return _rebuild, (type(self), dict(self.__dict__))


class NotFound(GroundworkError):
    """Missing, another account's, malformed or not visible to this principal: one answer
    for all, so an id reveals nothing (404 `not_found`). Every `<thing>_access_by_id`
    selector raises a subclass naming its thing; pages turn it into the 404 page."""

    status = 404
    default_message = "Not found."

    def __init__(self, message: str | None = None):
        super().__init__(CoreErrorCode.NOT_FOUND, message or self.default_message)


def object_id(value) -> int | None:
    """An id from a URL or a body as the database can hold it, or None (malformed, not
    positive, past bigint): the `*_access_by_id` selectors answer None as not found, never
    as a database error."""
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if 0 < number < 2**63 else None


def as_groundwork_error(exc: BaseException) -> GroundworkError:
    """Any exception as the error a client may see: domain errors as they are, anything
    else logged with its traceback and answered as a 500 `server_error`."""
    if isinstance(exc, GroundworkError):
        return exc
    unavailable = _unavailable_message(exc)
    if unavailable:
        logger.error("a service is unreachable: %s", exc)
        return GroundworkError(CoreErrorCode.UNAVAILABLE, unavailable, status=503)
    logger.error("unhandled error", exc_info=exc)
    return GroundworkError(CoreErrorCode.SERVER_ERROR, SERVER_ERROR_MESSAGE, status=500)


def _unavailable_message(exc: BaseException) -> str:
    """What a person is told when PostgreSQL or Redis cannot be reached (restarting, down):
    503 `unavailable`, not a 500, since trying again shortly is the fix (docs/operations/reliability.md)."""
    from django.db import InterfaceError, OperationalError

    if isinstance(exc, (OperationalError, InterfaceError)):
        return (
            "Groundwork cannot reach its database right now (it may be restarting), so nothing was "
            "changed. Please try again in a moment."
        )
    try:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError
    except ImportError:  # the parser sandbox imports core without redis's settings
        return ""
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
        return (
            "Groundwork cannot reach its queue and cache (Redis) right now, so this could not be done. "
            "Please try again in a moment."
        )
    return ""


def error_body(code: str, message: str, **extra) -> dict:
    """The REST and /v1 shape: {"error": {"code", "message", …extra}}."""
    body = {"error": {"code": code, "message": message}}
    body["error"].update({k: v for k, v in extra.items() if v is not None})
    return body


def error_frame(error: GroundworkError) -> dict:
    """The websocket and chat-SSE shape: a `chat.error` frame."""
    return {"type": "chat.error", "code": error.code, "message": error.message}
