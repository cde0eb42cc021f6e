"""The OpenAI API over HTTP, shared by the two model servers.

``llm.local_server`` (the bundled local models) and ``llm.fake_server`` (the
deterministic server the tests start) each supply a *backend* with their own
model logic; this module does the rest: routing (``GET /v1/models``,
``POST /v1/embeddings``, ``POST /v1/chat/completions``, ``GET /healthz``),
request parsing and validation, JSON responses, errors in OpenAI's
``{"error": {"message", "type", "param", "code"}}`` shape, embeddings as floats
or base64, and chat chunks streamed as server-sent events. Standard library only.
"""

from __future__ import annotations

import array
import base64
import json
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

log = logging.getLogger("llm.openai_http")

MAX_BODY_BYTES = 32 * 1024 * 1024


class ConnectionDropped(Exception):
    """Raised by a backend mid-stream: the connection is cut with no end to the body, as a
    model server that is killed cuts it (the fake server's way of dying, for fault tests)."""


class ApiError(Exception):
    """An error answered as ``{"error": {"message", "type", "code"}}`` with ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        error_type: str | None = None,
        code: str | None = None,
        param: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type or _default_error_type(status)
        self.code = code
        self.param = param

    def payload(self) -> dict:
        """The OpenAI error object (the value under ``"error"``)."""
        return {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}


def _default_error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


class Backend(Protocol):
    """What :class:`OpenAIHandler` needs to answer requests.

    Bodies handed to these methods are already validated (model is a
    string, input is a list of strings, messages is a non-empty list).
    Methods raise :class:`ApiError` to answer with an error.
    """

    def is_ready(self) -> bool: ...

    def model_ids(self) -> list[str]: ...

    def embeddings(self, body: dict, texts: list[str]) -> tuple[Sequence[Sequence[float]], int]: ...

    def chat(self, body: dict) -> dict: ...

    def chat_stream(self, body: dict, emit: Callable[[dict], bool]) -> None: ...

    def record(self, path: str, body: dict | None) -> None: ...


class OpenAIHandler(BaseHTTPRequestHandler):
    """Routes OpenAI API requests to ``self.server.backend``."""

    protocol_version = "HTTP/1.1"
    server_version = "groundwork-llm/1"
    # Idle keep-alive connections give their thread back after this long.
    timeout = 120

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without NODELAY,
        # Nagle + delayed ACK add ~40 ms to every small response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args) -> None:  # the stdlib's signature
        log.debug("%s " + format, self.address_string(), *args)

    @property
    def backend(self) -> Backend:
        return self.server.backend  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        routes = {
            "/healthz": {"GET": self._healthz},
            "/v1/models": {"GET": self._models},
            "/v1/embeddings": {"POST": self._embeddings},
            "/v1/chat/completions": {"POST": self._chat},
        }
        try:
            handler = routes.get(path, {}).get(method)
            if handler is None:
                self.backend.record(path, None)
                # The body (if any) is left unread, so this connection
                # cannot carry another request.
                self.close_connection = True
                if path in routes:
                    raise ApiError(405, f"Method {method} not allowed on {path}", code="method_not_allowed")
                raise ApiError(404, f"Invalid URL ({method} {path})", code="unknown_url")
            body = self._read_json() if method == "POST" else None
            self.backend.record(path, body)
            if path != "/healthz" and not self.backend.is_ready():
                raise ApiError(503, "models are still loading", code="not_ready")
            handler(body)
        except ApiError as err:
            self._send_json(err.status, {"error": err.payload()})
        except Exception as exc:  # the server must answer, not drop the socket
            log.exception("request failed")
            self._send_json(500, {"error": ApiError(500, f"internal error: {exc}").payload()})

    def _read_json(self) -> dict:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise ApiError(400, "a JSON body with Content-Length is required")
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            raise ApiError(413, "request body too large")
        raw = self.rfile.read(int(length))
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ApiError(400, "We could not parse the JSON body of your request.") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the JSON body must be an object")
        return body

    def _healthz(self, _body) -> None:
        if self.backend.is_ready():
            self._send_json(200, {"status": "ok"})
        else:
            self._send_json(503, {"status": "loading"})

    def _models(self, _body) -> None:
        data = [
            {"id": model_id, "object": "model", "created": 0, "owned_by": "local"}
            for model_id in self.backend.model_ids()
        ]
        self._send_json(200, {"object": "list", "data": data})

    def _embeddings(self, body: dict) -> None:
        _require_model(body)
        texts = _embedding_texts(body.get("input"))
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise ApiError(400, "encoding_format must be 'float' or 'base64'", param="encoding_format")
        vectors, tokens = self.backend.embeddings(body, texts)
        data = [{"object": "embedding", "index": i, "embedding": _encode_vector(v, fmt)} for i, v in enumerate(vectors)]
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _chat(self, body: dict) -> None:
        _validate_chat(body)
        if body.get("stream"):
            self._stream_chat(body)
        else:
            self._send_json(200, self.backend.chat(body))

    def _stream_chat(self, body: dict) -> None:
        """SSE: headers go out with the first chunk, so an error raised
        before any chunk still gets a proper status code."""
        stream = _SseStream(self)
        try:
            self.backend.chat_stream(body, stream.send)
        except ConnectionDropped:
            stream.drop()
            return
        except Exception as exc:
            if not stream.started:
                raise
            # Mid-stream the status line is gone; report in-band like OpenAI.
            if not isinstance(exc, ApiError):
                log.exception("stream failed")
                exc = ApiError(500, f"internal error: {exc}")
            stream.send({"error": exc.payload()})
        stream.finish()

    def _send_json(self, status: int, obj: dict) -> None:
        payload = json.dumps(obj).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class _SseStream:
    """Chunked ``text/event-stream`` writer that notices a vanished client."""

    def __init__(self, handler: OpenAIHandler):
        self.handler = handler
        self.started = False
        self.gone = False

    def send(self, obj: dict) -> bool:
        """Write one ``data:`` event; returns True once the client is gone."""
        return self._write(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def finish(self) -> None:
        """Write ``data: [DONE]`` and end the chunked body (unless the client left)."""
        if self._write(b"data: [DONE]\n\n"):
            return
        self._raw(b"0\r\n\r\n")

    def drop(self) -> None:
        """Cut the connection here, the body unfinished (ConnectionDropped)."""
        self._mark_gone()
        try:
            self.handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _write(self, event: bytes) -> bool:
        if self.gone:
            return True
        if not self.started:
            self._start()
        self._raw(b"%x\r\n%s\r\n" % (len(event), event))
        return self.gone

    def _start(self) -> None:
        self.started = True
        h = self.handler
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream; charset=utf-8")
            h.send_header("Cache-Control", "no-cache")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
        except (BrokenPipeError, ConnectionResetError):
            self._mark_gone()

    def _raw(self, data: bytes) -> None:
        if self.gone:
            return
        try:
            self.handler.wfile.write(data)
            self.handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._mark_gone()

    def _mark_gone(self) -> None:
        self.gone = True
        self.handler.close_connection = True


def _require_model(body: dict) -> None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise ApiError(400, "you must provide a model parameter", param="model")


def _embedding_texts(value) -> list[str]:
    """``input`` as a list of strings (token-id inputs are not supported)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise ApiError(400, "'input' must be a string or a non-empty array of strings", param="input")


def _validate_chat(body: dict) -> None:
    _require_model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty array", param="messages")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, "each message must be an object with a 'role'", param="messages")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise ApiError(400, "'stream' must be a boolean", param="stream")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ApiError(400, f"'{key}' must be a positive integer", param=key)


def _encode_vector(vector: Sequence[float], fmt: str):
    """The vector as a list of floats, or as base64 of little-endian float32
    (what the openai client decodes when it sends encoding_format=base64)."""
    if fmt == "float":
        return [float(x) for x in vector]
    packed = array.array("f", vector)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


class OpenAIHTTPServer(ThreadingHTTPServer):
    """Threaded HTTP server holding the backend its handlers answer from."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], backend: Backend):
        self.backend = backend
        self._thread: threading.Thread | None = None
        super().__init__(address, OpenAIHandler)

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def serve_in_background(self, name: str, poll_interval: float = 0.5) -> None:
        """Answer requests from a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": poll_interval}, name=name, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, close the socket and wait for the serving thread."""
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def make_http_server(host: str, port: int, backend: Backend) -> OpenAIHTTPServer:
    """A bound (not yet serving) server; ``port=0`` picks a free port."""
    return OpenAIHTTPServer((host, port), backend)


def on_stop_signals(stop: threading.Event) -> None:
    """Set ``stop`` on SIGINT or SIGTERM (call again after a library took the signals)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())


def wait_until_set(stop: threading.Event) -> None:
    """Block until ``stop`` is set. A timed wait keeps the main thread returning to
    the interpreter, where signal handlers run."""
    while not stop.wait(0.5):
        pass
