"""Request limits, enforced before anything reads a body or authenticates anyone.

- Size: upload endpoints (`settings.UPLOAD_PATHS`) take MAX_UPLOAD_BYTES plus multipart
  overhead, every other endpoint REQUEST_MAX_BYTES. A declared Content-Length over the
  limit is answered 413 at once; a body without one (chunked) is cut off as soon as it
  passes the limit. 413 is the contract's JSON error on /api/ and /v1/, a plain page
  elsewhere.
- NUL characters in the query string: 400 (PostgreSQL text cannot hold them, and no
  parameter of ours needs one).

Three layers, because each server buffers at a different place:
- `install_daphne_body_limit()`: daphne (Twisted) writes the whole body to a temporary file
  and then queues all of it, in 8 KB messages, for the application before the application
  runs: 300 MB in grows the process by GBs whatever an ASGI middleware does. So under
  daphne the limit is enforced on the connection, as the bytes arrive.
- `BodySizeLimit`: the same rule as ASGI middleware, for any other ASGI server.
- `RequestLimitsMiddleware`: the same rule in Django (WSGI, the test client, and a backstop).
"""

from __future__ import annotations

import json
import logging
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.http import HttpResponse

from core.errors import error_body

logger = logging.getLogger("groundwork.limits")

# (/mcp: the MCP server answers JSON too, integrations/mcp_http.py.)
API_PREFIXES = ("/api/", "/v1/", "/mcp")
# A multipart upload carries its part headers and boundaries besides the file.
MULTIPART_OVERHEAD = 64 * 1024
# How long a refused client may keep its connection while it reads the 413.
REFUSED_LINGER_SECONDS = 10

NUL_MESSAGE = "The request contains a NUL character (%00), which no field accepts."
PAGE = (
    "<!doctype html><html lang=en><head><meta charset=utf-8><title>{title}</title></head>"
    "<body><h1>{title}</h1><p>{message}</p></body></html>"
)


def body_limit_for(path: str) -> int:
    """The largest request body, in bytes, that `path` accepts."""
    if path in settings.UPLOAD_PATHS:
        return settings.MAX_UPLOAD_BYTES + MULTIPART_OVERHEAD
    return settings.REQUEST_MAX_BYTES


def too_large_message(path: str) -> str:
    if path in settings.UPLOAD_PATHS:
        return (
            f"This file is larger than the {settings.MAX_UPLOAD_BYTES / (1024 * 1024):g} MB limit. "
            "Split it into smaller files and upload them separately."
        )
    return f"The request body is larger than this endpoint's {body_limit_for(path) // 1024:,} KB limit."


def _is_api(path: str) -> bool:
    return path.startswith(API_PREFIXES)


def refusal(path: str, status: int) -> tuple[str, bytes]:
    """(content type, body) of a 413 or 400 refusal for `path`."""
    if status == 413:
        code, title, message = "too_large", "Request too large", too_large_message(path)
    else:
        code, title, message = "bad_request", "Bad request", NUL_MESSAGE
    if _is_api(path):
        return "application/json", json.dumps(error_body(code, message)).encode()
    return "text/html; charset=utf-8", PAGE.format(title=title, message=message).encode()


def declared_length(value) -> int | None:
    try:
        length = int(value)
    except (TypeError, ValueError):
        return None
    return length if length >= 0 else None


def query_has_nul(query_string: bytes | str) -> bool:
    raw = query_string.encode("latin-1") if isinstance(query_string, str) else query_string
    return b"%00" in raw or b"\x00" in unquote_to_bytes(raw)


# --- Django ---------------------------------------------------------------------------------


class RequestLimitsMiddleware:
    """First in MIDDLEWARE: nothing (sessions, authentication, parsers) has run yet."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path_info
        length = declared_length(request.META.get("CONTENT_LENGTH"))
        if length is not None and length > body_limit_for(path):
            return self._refuse(path, 413)
        if query_has_nul(request.META.get("QUERY_STRING", "")):
            return self._refuse(path, 400)
        return self.get_response(request)

    @staticmethod
    def _refuse(path: str, status: int) -> HttpResponse:
        content_type, body = refusal(path, status)
        return HttpResponse(body, status=status, content_type=content_type)


# --- ASGI -----------------------------------------------------------------------------------


class BodySizeLimit:
    """ASGI middleware: refuses an over-limit Content-Length without reading the body, and
    answers 413 the moment a body without one passes the limit (the application then sees
    a disconnect, so it never answers too)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        limit = body_limit_for(path)
        headers = dict(scope.get("headers") or [])
        length = declared_length(headers.get(b"content-length", b"").decode("latin-1") or None)
        if length is not None and length > limit:
            return await _send_refusal(send, path, 413)
        if query_has_nul(scope.get("query_string", b"")):
            return await _send_refusal(send, path, 400)
        state = {"seen": 0, "refused": False}

        async def limited_receive():
            if state["refused"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                state["seen"] += len(message.get("body", b""))
                if state["seen"] > limit:
                    state["refused"] = True
                    await _send_refusal(send, path, 413)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message):
            if not state["refused"]:
                await send(message)

        return await self.app(scope, limited_receive, guarded_send)


async def _send_refusal(send, path: str, status: int) -> None:
    content_type, body = refusal(path, status)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# --- daphne -----------------------------------------------------------------------------------


def install_daphne_body_limit() -> None:
    """Make daphne refuse over-limit bodies on the connection, before it buffers them.

    daphne builds each request from `daphne.http_protocol.WebRequest` (looked up when a
    connection is made), so a subclass put in its place sees the body as it arrives:
    Twisted calls `gotLength` once the headers are in and `handleContentChunk` per piece
    of body (de-chunked). On refusal the 413 is written straight to the socket, reading
    stops (the client's sends block, its 413 is waiting) and the connection is dropped after
    REFUSED_LINGER_SECONDS unless the client closes it first. Memory stays flat: at most a
    socket buffer's worth is read past the limit, and nothing past it is kept.
    """
    try:
        from daphne import http_protocol
    except ImportError:  # another server: BodySizeLimit and the Django middleware apply
        return
    if getattr(http_protocol.WebRequest, "groundwork_body_limit", False):
        return
    http_protocol.WebRequest = _limited_request_class(http_protocol.WebRequest)


def _limited_request_class(base):
    from twisted.internet import reactor

    class LimitedWebRequest(base):
        groundwork_body_limit = True

        def gotLength(self, length):
            raw_path = getattr(self.channel, "_path", b"") or b""
            self.limit_path = raw_path.split(b"?", 1)[0].decode("latin-1")
            self.body_limit = body_limit_for(self.limit_path)
            self.body_seen = 0
            self.refused = False
            if length is not None and length > self.body_limit:
                # Before Twisted answers `Expect: 100-continue`: the body is never invited.
                self.refuse()
                super().gotLength(0)
                return
            super().gotLength(length)

        def handleContentChunk(self, data):
            if self.refused:
                return
            self.body_seen += len(data)
            if self.body_seen > self.body_limit:
                self.refuse()
                return
            super().handleContentChunk(data)

        def refuse(self):
            self.refused = True
            content_type, body = refusal(self.limit_path, 413)
            head = (
                f"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            transport = self.channel.transport
            logger.info("refused a request body over %s bytes for %s", self.body_limit, self.limit_path)
            transport.write(head + body)
            transport.pauseProducing()  # read no more of it
            reactor.callLater(REFUSED_LINGER_SECONDS, transport.abortConnection)
            # Answered `Expect: 100-continue` would invite the body: pretend it is HTTP/1.0.
            self.channel._version = b"HTTP/1.0"

        def process(self):
            if getattr(self, "refused", False):
                return None  # answered in refuse(); the application never sees it
            return super().process()

    return LimitedWebRequest
