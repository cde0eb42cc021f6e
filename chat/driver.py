"""The one driver of a chat turn. Every surface (the websocket consumer, REST, REST + SSE,
the OpenAI-compatible endpoint) runs a turn through `TurnRun` and relays its frames, so a
turn prepares, streams, settles and fails the same way everywhere.

Frames are the websocket's (docs/api/websocket.md): `chat.sources`, `chat.token`…, then `chat.done`
or `chat.error`. `frames()` is the turn itself, synchronous (ORM and model calls block);
`aframes()` runs it in a worker thread and hands its frames to an event loop as they come.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from chat.agent import TurnOptions, turn_finish, turn_prepare
from core import metrics
from core.errors import GroundworkError, as_groundwork_error, error_frame
from core.request_id import current_request_id, request_id_set

logger = logging.getLogger("groundwork.chat")

# How long a turn keeps trying to settle its credits and store its answer while the database
# is unreachable (PostgreSQL restarting): the answer was generated and paid for by the
# provider, so it is worth waiting for (docs/operations/reliability.md).
SETTLE_RETRY_SECONDS = 30.0

# Token frames after the first go out at most this often (seconds): a person reads no
# faster, and every websocket or SSE frame costs the web process CPU (docs/benchmarks.md, Chat).
TOKEN_FRAME_INTERVAL = 0.03

# What `chat.done` carries, written once for every surface.
DONE_KEYS = (
    "message_id",
    "conversation_id",
    "answer",
    "citations",
    "usage",
    "credits_remaining",
    "status",
    "finish_reason",
    "budget_remaining",
    "budget_period",
    "credits_charged",
)


class TurnRun:
    """One question, answered once (`regenerate=True`: the conversation's last question, asked
    again; chat.agent.turn_prepare). `cancel()` may be called from any thread at any time:
    before the model is called it skips the call (nothing is charged but what was spent on
    retrieval), during the answer it stops generation and pays for what was generated."""

    def __init__(
        self,
        *,
        account,
        user=None,
        api_key=None,
        question,
        conversation_id=None,
        history: list[tuple[str, str]] | None = None,
        options: TurnOptions | None = None,
        authorize=None,
        tags: list[str] | None = None,
        exclude_tags: list[str] | None = None,
        regenerate: bool = False,
        surface: str = "api",
    ):
        # `tags` / `exclude_tags` (MCP's ask passes them here) win over the options' own.
        if tags is not None or exclude_tags is not None:
            options = dataclasses.replace(
                options or TurnOptions(),
                **({"tags": tags} if tags is not None else {}),
                **({"exclude_tags": exclude_tags} if exclude_tags is not None else {}),
            )
        self.id = uuid.uuid4().hex
        self.cancelled = threading.Event()
        self.error: GroundworkError | None = None
        self.done: dict | None = None
        self.turn = None
        # For /metrics: which surface relays it (websocket, api, openai, mcp), when it was
        # asked and when its first token came; counted once, when it ends.
        self.surface = surface
        # The request (or websocket turn) it was asked in: its thread logs with that id, also
        # when an SSE response streams it after the request's middleware has returned.
        self.request_id = current_request_id()
        self._asked_at = time.perf_counter()
        self._first_token_at: float | None = None
        # Which model call the turn is waiting for ("search": its question's embedding,
        # "answer": the answer's first token; None once the answer streams or the turn ends),
        # and the (conversation, question) ids once its question is stored.
        self.step: str | None = "search"
        self.stored_question: tuple[int, int] | None = None
        self._observed = False
        self._prepare = dict(
            account=account,
            user=user,
            api_key=api_key,
            question=question,
            conversation_id=conversation_id,
            history=history,
            options=options,
            authorize=authorize,
            regenerate=regenerate,
        )

    def cancel(self) -> None:
        self.cancelled.set()

    def prepare(self) -> None:
        """Everything before the model call (route, hold, retrieve), raising its error.
        HTTP surfaces call it before they answer, so a refused turn gets its own status
        (402, 404, 429) instead of an error inside a 200 stream."""
        if self.turn is None:
            try:
                self.turn = turn_prepare(**self._prepare, request_id=self.id, cancelled=self.cancelled)
            except Exception as exc:
                self._observe(as_groundwork_error(exc).code)
                self._say_where_stored(exc)
                raise

    def frames(self) -> Iterator[dict]:
        """The turn, frame by frame. Always settles its credits, also when the consumer of
        the frames goes away mid-answer (GeneratorExit)."""
        try:
            self.prepare()
        except Exception as exc:
            yield self._fail(exc)
            return
        turn = self.turn
        self.stored_question = (turn.conversation.pk, turn.user_message.pk)
        self.step = "answer"
        yield {
            "type": "chat.sources",
            "conversation_id": turn.conversation.pk,
            "conversation_title": turn.conversation.title,
            "sources": turn.sources,
            "route": turn.route,
            "query": turn.query,
        }
        failed = None
        try:
            for text in turn.stream():
                if self._first_token_at is None:
                    self._first_token_at = time.perf_counter()
                    self.step = None
                yield {"type": "chat.token", "text": text}
        except GeneratorExit:
            self.cancel()
            _settle(turn)
            self._observe("cancelled")
            raise
        except Exception as exc:
            failed = exc
        try:
            result = _settle(turn, failed=failed)
        except Exception as exc:
            yield self._fail(exc)
            return
        if failed is not None:
            yield self._fail(failed)
            return
        self.done = {"type": "chat.done", **{k: result[k] for k in DONE_KEYS}}
        self._observe("cancelled" if self.cancelled.is_set() else "done")
        yield self.done

    def run(self) -> dict:
        """The whole turn at once: the `chat.done` frame, or the turn's GroundworkError raised."""
        for _ in self.frames():
            pass
        if self.error is not None:
            raise self.error
        return self.done

    async def aframes(self) -> AsyncIterator[dict]:
        """`frames()` in a worker thread, relayed to the event loop. Tokens that arrive
        while the consumer is busy are joined into one `chat.token` frame. If the consumer
        stops listening (a closed socket or HTTP client), the turn is cancelled and still
        settled in its thread.

        The thread wakes the loop once per batch, not once per frame: frames produced while
        a wake-up is on its way, or while the consumer is still sending the last batch, join
        the next one (a fast model's tokens cost one loop iteration and one websocket frame
        per batch instead of per token; measured in docs/benchmarks.md, Chat). After the
        first token, token frames go out at most every TOKEN_FRAME_INTERVAL: the tokens of a
        fast model that arrive in between join one frame (the first token, and the end of
        the answer, are never held back)."""
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        pending: list = []
        lock = threading.Lock()
        waking = False  # a wake-up is scheduled on the loop and has not been taken yet
        end = object()

        pause: asyncio.Future | None = None  # set while token frames are held back

        def cut_pause() -> None:
            if pause is not None and not pause.done():
                pause.set_result(None)

        def hand_over(frame) -> None:
            nonlocal waking
            with lock:
                pending.append(frame)
                wake, waking = not waking, True
            if wake:
                loop.call_soon_threadsafe(ready.set)
            elif not _is_token(frame):  # the end of the answer (or an error) is not held back
                loop.call_soon_threadsafe(cut_pause)

        def produce():
            if self.request_id is None:
                return _produce()
            with request_id_set(self.request_id):
                return _produce()

        def _produce():
            close_old_connections()
            try:
                for frame in self.frames():
                    hand_over(frame)
            finally:
                close_old_connections()
                hand_over(end)

        producer = loop.run_in_executor(None, produce)
        tokens_sent_at = None  # when the last chat.token frame went out (loop time)
        notice_every = settings.CHAT_WAIT_NOTICE_SECONDS
        try:
            while True:
                if notice_every > 0 and self.step is not None:
                    try:
                        await asyncio.wait_for(ready.wait(), notice_every)
                    except TimeoutError:
                        # Nothing from the model server for a while: say the turn waits for it.
                        notice = self._waiting_notice()
                        if notice is not None:
                            yield notice
                        continue
                else:
                    await ready.wait()
                if tokens_sent_at is not None:
                    with lock:
                        only_tokens = all(_is_token(frame) for frame in pending)
                    wait = tokens_sent_at + TOKEN_FRAME_INTERVAL - loop.time()
                    if only_tokens and wait > 0:  # more tokens join this frame meanwhile
                        pause = loop.create_future()
                        timer = loop.call_later(wait, cut_pause)
                        try:
                            await pause
                        finally:
                            timer.cancel()
                            pause = None
                with lock:
                    ready.clear()
                    waking = False
                    batch = pending[:]
                    pending.clear()
                for frame in _joined(batch):
                    if frame is end:
                        return
                    yield frame
                    if _is_token(frame):
                        tokens_sent_at = loop.time()
        finally:
            if not producer.done():
                self.cancel()
            # The thread settles the credits whatever happened here; wait for it.
            await asyncio.shield(producer)

    def http_events(self, request, render, *, head: tuple = (), tail: tuple = ()):
        """Server-sent events for an HTTP response: `head`, then `render(frame)` for each
        frame, then `tail`. Under ASGI (daphne) an async iterator, sent as produced while the
        turn runs in a worker thread; under WSGI (test clients) the same turn in the
        request's own thread."""
        if isinstance(request, ASGIRequest):

            async def events():
                for event in head:
                    yield event
                # aclosing: when the client hangs up while an event is being sent, this
                # generator is closed at its `yield`; the turn's frames must be closed (and
                # the turn cancelled) then too, not whenever the garbage collector gets to them.
                async with aclosing(self.aframes()) as frames:
                    async for frame in frames:
                        for event in render(frame):
                            yield event
                for event in tail:
                    yield event

            return events()

        def events():
            yield from head
            for frame in self.frames():
                yield from render(frame)
            yield from tail

        return events()

    def _fail(self, exc: Exception) -> dict:
        self.step = None
        self.error = as_groundwork_error(exc)
        self._observe(self.error.code)
        self._say_where_stored(exc)
        self._say_where_stored(self.error)
        return {**error_frame(self.error), **getattr(self.error, "details", {})}

    def _say_where_stored(self, exc: BaseException) -> None:
        """When the turn's question is stored, its error says where (`details`: the REST
        error body's and the chat.error frame's conversation_id and question_id), so every
        surface keeps it in its conversation and can ask it again (regenerate) without a
        second copy."""
        stored = self.stored_question or getattr(exc, "stored_question", None)
        if stored is None:
            return
        self.stored_question = stored
        if isinstance(exc, GroundworkError):
            exc.details = {"conversation_id": stored[0], "question_id": stored[1]}  # type: ignore[attr-defined]

    def _waiting_notice(self) -> dict | None:
        """A `chat.status` frame: the turn is waiting for the model server, at which step and
        for how long so far (None: it no longer waits)."""
        step = self.step
        stream = getattr(self.turn, "llm_stream", None)
        if step is None or (stream is not None and stream.generated):
            return None  # the model is writing (its first sentence may be held back while checked)
        waited = int(time.perf_counter() - self._asked_at)
        doing = "to read your question" if step == "search" else "to start the answer"
        return {
            "type": "chat.status",
            "state": "waiting",
            "step": step,
            "waited_seconds": waited,
            "message": f"Waiting for the model server {doing}: it is busy (documents being indexed, "
            f"or other questions). Waiting {waited} s so far; your question is kept.",
        }

    def _observe(self, outcome: str) -> None:
        if self._observed:
            return
        self._observed = True
        first = None if self._first_token_at is None else self._first_token_at - self._asked_at
        metrics.chat_turn_observe(
            surface=self.surface,
            outcome=str(outcome),
            seconds=time.perf_counter() - self._asked_at,
            first_token_seconds=first,
        )


def _settle(turn, *, failed: Exception | None = None) -> dict:
    """turn_finish, tried again with a new connection while the database is unreachable (up
    to SETTLE_RETRY_SECONDS): its transaction was rolled back, so nothing is stored twice, and
    the hold, the answer and its charge are written together once the database is back."""
    deadline = time.monotonic() + SETTLE_RETRY_SECONDS
    delay = 0.25
    while True:
        try:
            return turn_finish(turn, failed=failed)
        except (OperationalError, InterfaceError) as exc:
            if time.monotonic() + delay > deadline:
                raise
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            logger.warning(
                "settling chat turn %s: the database is unreachable (%s); trying again in %.2g s",
                turn.request_id,
                reason,
                delay,
            )
            connection.close()  # broken: the next query opens (or borrows) a new one
            time.sleep(delay)
            delay = min(delay * 2, 4.0)


def _is_token(frame) -> bool:
    return isinstance(frame, dict) and frame["type"] == "chat.token"


def _joined(frames: list) -> list:
    """Consecutive `chat.token` frames joined into one."""
    joined: list = []
    texts: list[str] = []  # the run of tokens being joined

    def close_run():
        if texts:
            joined.append({"type": "chat.token", "text": "".join(texts)})
            texts.clear()

    for frame in frames:
        if _is_token(frame):
            texts.append(frame["text"])
        else:
            close_run()
            joined.append(frame)
    close_run()
    return joined


def sse(data: dict | str) -> str:
    """One server-sent event: `data: <json>` (or a literal such as `[DONE]`)."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
