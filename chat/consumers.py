"""The chat websocket, /ws/chat/ (CONTRACT.md). Thin: authenticate the handshake, run each
message's turn through the one driver (`chat.driver.TurnRun`) and send its frames."""
from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlparse

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.db import close_old_connections
from django.http.request import validate_host

from accounts.resolution import bearer_token, resolve_api_key, resolve_session
from chat.driver import TurnRun
from chat.errors import ChatError
from core.errors import error_frame

logger = logging.getLogger("groundwork.chat")

UNAUTHENTICATED = 4401
FORBIDDEN_ORIGIN = 4403


def _in_thread(func):
    """Run ORM work in a worker thread of its own (not the single shared one), so one slow
    socket does not queue every other socket's database work behind it."""
    def call(*args, **kwargs):
        close_old_connections()
        try:
            return func(*args, **kwargs)
        finally:
            close_old_connections()
    return sync_to_async(call, thread_sensitive=False)


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _origin_allowed(origin: str | None) -> bool:
    if not origin:
        return False
    parsed = urlparse(origin)
    if not parsed.hostname:
        return False
    host = parsed.hostname if parsed.port is None else f"{parsed.hostname}:{parsed.port}"
    allowed = [urlparse(o).netloc for o in settings.CSRF_TRUSTED_ORIGINS]
    return validate_host(parsed.hostname, settings.ALLOWED_HOSTS) or host in allowed


class ChatConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        self.generation: asyncio.Task | None = None
        self.run: TurnRun | None = None
        token = bearer_token(_header(self.scope, b"authorization"))
        if token is not None:
            resolution = await _in_thread(resolve_api_key)(token)
        else:
            user = self.scope.get("user")
            resolution = await _in_thread(resolve_session)(user, self.scope.get("session"))
            if resolution.account is not None and not _origin_allowed(_header(self.scope, b"origin")):
                # Cross-site websocket hijacking: a session cookie alone does not prove the page is ours.
                await self.accept()
                await self.close(code=FORBIDDEN_ORIGIN)
                return
        await self.accept()
        if resolution.account is None:
            await self.close(code=UNAUTHENTICATED)
            return
        self.account = resolution.account
        self.user = resolution.user if token is None else resolution.user
        self.api_key = resolution.api_key

    async def disconnect(self, code):
        if self.generation and not self.generation.done():
            self.run.cancel()
            # Let the turn settle its credits; the socket is gone, so no frames are sent.
            await asyncio.shield(self.generation)

    async def receive_json(self, content, **kwargs):
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "chat.cancel":
            if self._answering():
                self.run.cancel()  # also while the turn is still being prepared
            return
        if kind != "chat.message":
            await self._error(ChatError("bad_request", 'Send {"type": "chat.message", "message": "…"} '
                                                       'or {"type": "chat.cancel"}.'))
            return
        if self._answering():
            await self._error(ChatError("bad_request", "An answer is still being written: wait for it, or send "
                                                       "chat.cancel first."))
            return
        self.run = TurnRun(account=self.account, user=self.user, api_key=self.api_key,
                           question=content.get("message"), conversation_id=content.get("conversation_id"))
        self.generation = asyncio.create_task(self._relay(self.run))

    async def decode_json(self, text_data):
        import json

        try:
            return json.loads(text_data)
        except ValueError:
            return {"type": None}

    async def _error(self, error: ChatError):
        await self.send_json(error_frame(error))

    def _answering(self) -> bool:
        """A turn is under way until its chat.done or chat.error is out (its task may still
        be tidying up its thread after that; the turn is settled by then)."""
        return self.run is not None and self.run.done is None and self.run.error is None and (
            self.generation is not None and not self.generation.done())

    async def _relay(self, run: TurnRun):
        async for frame in run.aframes():
            try:
                await self.send_json(frame)
            except Exception:  # the socket closed under us; the turn still settles
                logger.info("chat socket closed during turn %s", run.id)
                run.cancel()
