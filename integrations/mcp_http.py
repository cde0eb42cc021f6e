"""`/mcp` in the ASGI app (config/asgi.py): the MCP SDK's Streamable HTTP transport, stateless
and answering JSON, behind the REST API's own API-key authentication.

A request reaches the SDK only with an active key: no `Authorization: Bearer` answers 401
`unauthenticated`, an unknown or revoked key 401 `invalid_api_key`, with the REST API's bodies
(core.api.exception_handler). The key is looked up as the REST middleware looks it up
(accounts.resolution: the hash of the secret; revoked keys and deleted accounts refused), its
use recorded (`api_key_touch`), and handed to the tools in the ASGI scope
(integrations.mcp_server.API_KEY_SCOPE). Stateless: every request authenticates anew, so a key
revoked between two calls is refused at the second.

The Host header is checked against ALLOWED_HOSTS as Django checks it (a 400 otherwise). The
SDK's own DNS-rebinding guard (a fixed list of localhost names) is off: it would refuse every
real host name, and the rebinding attack it guards against needs a server that trusts whoever
can reach it, while this one wants a key in every request.
"""

from __future__ import annotations

import asyncio
import io
import json

from asgiref.sync import sync_to_async
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from rest_framework import exceptions

from accounts.resolution import bearer_token, resolve_api_key
from accounts.services import api_key_touch
from core.api import exception_handler
from core.authentication import INVALID_API_KEY_MESSAGE
from core.error_codes import CoreErrorCode
from core.errors import error_body
from core.tenancy import account_context
from integrations.mcp_server import API_KEY_SCOPE, server

MCP_PATH = "/mcp"


def is_mcp_path(path: str) -> bool:
    return path.rstrip("/") == MCP_PATH


def _authenticated_key(token: str):
    """The active key for `token`, its use recorded; None for an unknown or revoked one."""
    close_old_connections()
    try:
        key = resolve_api_key(token).api_key
        if key is not None:
            with account_context(key.account):
                api_key_touch(key=key)
        return key
    finally:
        close_old_connections()


async def _send_json(send, status: int, body: dict, headers: tuple = ()) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json"), *headers]}
    )
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


async def _refuse(send, exc: exceptions.APIException, headers: tuple = ()) -> None:
    """The REST API's status and body for the same refusal."""
    await _send_json(send, exc.status_code, exception_handler(exc, {}).data, headers=headers)


_CHALLENGE = ((b"www-authenticate", b'Bearer realm="mcp"'),)


def _host_allowed(scope) -> bool:
    try:
        ASGIRequest(scope, io.BytesIO()).get_host()  # Django's own ALLOWED_HOSTS rule
    except DisallowedHost:
        return False
    return True


class _Sessions:
    """The SDK's session manager, started once per event loop on the first request: daphne
    speaks no ASGI lifespan, so nothing would start it at boot. Stateless, so it keeps nothing
    between requests; its task group only runs each request's server. Started again if it ever
    stopped (its task ended)."""

    def __init__(self):
        # loop -> (the started manager's future, the task running it): one loop per server process.
        self._running: dict[asyncio.AbstractEventLoop, tuple[asyncio.Future, asyncio.Task]] = {}

    @staticmethod
    def _manager() -> StreamableHTTPSessionManager:
        server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        return server.session_manager

    async def ready(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        running = self._running.get(loop)
        if running is None or running[1].done():
            started = loop.create_future()
            running = self._running[loop] = (started, loop.create_task(self._run(started)))
        return await asyncio.shield(running[0])

    @classmethod
    async def _run(cls, started: asyncio.Future) -> None:
        try:
            manager = cls._manager()
            async with manager.run():
                started.set_result(manager)
                await asyncio.Event().wait()  # for the life of the process
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise


_sessions = _Sessions()


async def mcp_endpoint(scope, receive, send) -> None:
    """The ASGI application of `/mcp`."""
    if not _host_allowed(scope):
        return await _send_json(send, 400, error_body(CoreErrorCode.BAD_REQUEST, "Invalid Host header."))
    headers = dict(scope.get("headers") or [])
    token = bearer_token(headers.get(b"authorization", b"").decode("latin-1") or None)
    if token is None:
        return await _refuse(send, exceptions.NotAuthenticated(), _CHALLENGE)
    key = await sync_to_async(_authenticated_key, thread_sensitive=False)(token)
    if key is None:
        return await _refuse(send, exceptions.AuthenticationFailed(INVALID_API_KEY_MESSAGE), _CHALLENGE)
    if scope["method"] != "POST":
        # Stateless: no session to end (DELETE), and nothing would ever arrive on the stream a
        # GET opens, which would hold the connection open for nothing. The spec's answer for a
        # server without that stream is 405.
        return await _refuse(send, exceptions.MethodNotAllowed(scope["method"]), ((b"allow", b"POST"),))
    manager = await _sessions.ready()
    await manager.handle_request({**scope, API_KEY_SCOPE: key}, receive, send)


class McpRouter:
    """`/mcp` (and `/mcp/`) to the MCP endpoint, every other HTTP request to `app` (Django)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and is_mcp_path(scope.get("path", "")):
            return await mcp_endpoint(scope, receive, send)
        return await self.app(scope, receive, send)
