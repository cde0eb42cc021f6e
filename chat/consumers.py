"""The chat websocket, /ws/chat/ (CONTRACT.md). Thin: authenticate the handshake, run each
message's turn (prepare → stream → finish) and turn results and errors into frames."""
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
from chat.agent import turn_finish, turn_prepare
from chat.errors import ChatError
from core.errors import as_groundwork_error

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
        self.turn = None
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
            if self.turn is not None:
                self.turn.cancelled.set()
            # Let the turn settle its credits; the socket is gone, so no frames are sent.
            await asyncio.shield(self.generation)

    async def receive_json(self, content, **kwargs):
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "chat.cancel":
            if self.turn is not None:
                self.turn.cancelled.set()
            return
        if kind != "chat.message":
            await self._error(ChatError("bad_request", 'Send {"type": "chat.message", "message": "…"} '
                                                       'or {"type": "chat.cancel"}.'))
            return
        if self.generation and not self.generation.done():
            await self._error(ChatError("bad_request", "An answer is still being written: wait for it, or send "
                                                       "chat.cancel first."))
            return
        self.generation = asyncio.create_task(self._answer(content.get("message"), content.get("conversation_id")))

    async def decode_json(self, text_data):
        import json

        try:
            return json.loads(text_data)
        except ValueError:
            return {"type": None}

    async def _error(self, error: ChatError):
        await self.send_json({"type": "chat.error", "code": error.code, "message": error.message})

    async def _answer(self, message, conversation_id):
        try:
            self.turn = await _in_thread(turn_prepare)(account=self.account, user=self.user, api_key=self.api_key,
                                                       question=message, conversation_id=conversation_id)
        except Exception as exc:
            await self._error(self._mapped(exc))
            return
        turn = self.turn
        await self.send_json({"type": "chat.sources", "conversation_id": turn.conversation.pk,
                              "sources": turn.sources})
        failed = await self._relay_tokens(turn)
        try:
            result = await _in_thread(turn_finish)(turn, failed=failed)
        except Exception as exc:
            logger.exception("could not finish chat turn %s", turn.request_id)
            await self._error(self._mapped(exc))
            return
        finally:
            self.turn = None
        if failed is not None:
            await self._error(self._mapped(failed))
            return
        await self.send_json({"type": "chat.done", "message_id": result["message_id"],
                              "conversation_id": result["conversation_id"], "citations": result["citations"],
                              "usage": result["usage"], "credits_remaining": result["credits_remaining"],
                              "status": result["status"]})

    async def _relay_tokens(self, turn) -> Exception | None:
        """Stream the model's text in a thread; send what has arrived as chat.token frames."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def produce():
            try:
                for text in turn.stream():
                    loop.call_soon_threadsafe(queue.put_nowait, ("token", text))
                loop.call_soon_threadsafe(queue.put_nowait, ("end", None))
            except Exception as exc:  # handed to the event loop, reported as chat.error
                loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))

        producer = loop.run_in_executor(None, produce)
        failed = None
        while True:
            kind, value = await queue.get()
            parts = []
            while kind == "token":
                parts.append(value)
                if queue.empty():
                    break
                kind, value = queue.get_nowait()
            if parts:
                await self.send_json({"type": "chat.token", "text": "".join(parts)})
            if kind == "error":
                failed = value
                break
            if kind == "end":
                break
        await producer
        return failed

    @staticmethod
    def _mapped(exc: Exception) -> ChatError:
        return as_groundwork_error(exc)
