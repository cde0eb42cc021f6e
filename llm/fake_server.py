"""A deterministic OpenAI-compatible server for tests (no model weights).

In a test::

    with FakeOpenAIServer(fail_models={"broken-model"}) as srv:
        client = OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        ...
        assert srv.requests[-1]["body"]["model"] == "..."

or from a shell: ``python -m llm.fake_server --port 8002``.

Guarantees:

* ``/v1/embeddings``: 384-dim unit vectors that depend only on the text
  (hashed bag of words plus word-edge trigrams, so texts sharing words get
  close vectors); ``usage`` = whitespace-separated token count of the input.
* ``/v1/chat/completions``: the answer depends only on the messages (by
  default ``"Fake answer: "`` + the first 12 words of the last user message);
  streamed one word per chunk, with OpenAI's final usage chunk (empty
  ``choices``) when ``stream_options.include_usage`` is true. Usage counts
  whitespace tokens of all message contents and of the answer. An answer cut
  at ``max_completion_tokens`` (else ``max_tokens``) words finishes with
  ``"length"``, otherwise ``"stop"``.
* Every streamed answer is recorded in ``streams`` as it goes: ``sent_at``
  (``time.monotonic()`` as each content chunk was written), ``words`` (the
  content chunks the whole answer has), ``usage``, ``finish_reason`` and
  ``client_left`` (the client closed the connection and generation stopped).
* A chat request with ``image_url`` content parts (a vision request) is answered
  ``"Fake image description: a <media type> picture of <n> bytes, digest <sha256[:12]>."``
  per image, whatever ``answer`` is; each image adds ``IMAGE_TOKENS`` (85) prompt tokens.
* With ``context_tokens``, a chat request whose prompt tokens and ``max_tokens`` pass it
  gets OpenAI's 400 ``context_length_exceeded``.
* Any model name is accepted; a model in ``fail_models`` gets an OpenAI error
  with the configured HTTP status (500 by default, e.g. 429 to test retries).
* Every request's path and JSON body is appended to ``requests`` (before
  any failure is simulated), in arrival order.
* A busy or flaky server: ``delay`` (seconds every embedding and chat request waits
  before it is answered, as a request waits in a busy server's queue), and
  :meth:`FakeOpenAIServer.outage`: the next ``n`` requests to a path answer an HTTP status
  (503, 429, ...) or ``"timeout"`` (held ``hang_seconds`` before any answer, longer than
  the client waits), then the server recovers; ``outages_served`` counts them.

The HTTP layer is ``llm.openai_http`` (shared with ``llm.local_server``);
this module only makes up the answers. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from llm.openai_http import ApiError, make_http_server, on_stop_signals, wait_until_set

EMBEDDING_DIM = 384
DEFAULT_MODELS = ("smollm2-135m-instruct", "all-minilm-l6-v2")
ANSWER_WORDS = 12

_WORD = re.compile(r"[a-z0-9]+")


def fake_embedding(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """A deterministic unit vector for ``text``.

    Each lowercase word adds weight to one hashed coordinate and each of its
    trigrams a smaller weight to another, so shared words (and word forms)
    raise the cosine similarity. Text without words maps to a fixed vector.
    """
    vector = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        _add_feature(vector, "w:" + word, 1.0)
        padded = f"<{word}>"
        for i in range(len(padded) - 2):
            _add_feature(vector, "t:" + padded[i : i + 3], 0.25)
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        vector[0] = 1.0
        return vector
    return [x / norm for x in vector]


def _add_feature(vector: list[float], feature: str, weight: float) -> None:
    # blake2b rather than hash(): stable across processes and PYTHONHASHSEED.
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    index = int.from_bytes(digest[:4], "little") % len(vector)
    sign = 1.0 if digest[4] & 1 else -1.0
    vector[index] += sign * weight


def count_tokens(text: str) -> int:
    """The fake tokenizer: whitespace-separated pieces."""
    return len(text.split())


def default_answer(messages: list[dict]) -> str:
    """``"Fake answer: "`` + the first words of the last user message."""
    last = next((m for m in reversed(messages) if m.get("role") == "user"), messages[-1])
    words = _content_text(last.get("content")).split()
    summary = " ".join(words[:ANSWER_WORDS]) + (" ..." if len(words) > ANSWER_WORDS else "")
    return f"Fake answer: {summary}".rstrip()


def _content_text(content) -> str:
    """Text of a message's content (a string or OpenAI content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


# What an image in a chat request costs, in prompt tokens (OpenAI's price of a low-detail image).
IMAGE_TOKENS = 85


def image_parts(messages: list[dict]) -> list[str]:
    """The data URLs (or URLs) of every image_url content part of the messages."""
    urls = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            urls += [
                (p.get("image_url") or {}).get("url", "")
                for p in content
                if isinstance(p, dict) and p.get("type") == "image_url"
            ]
    return urls


def describe_images(urls: list[str]) -> str:
    """The fake vision answer: for each image its media type, size and a digest of its bytes,
    so a test can tell exactly which image was sent."""
    import base64

    parts = []
    for url in urls:
        header, _, payload = url.partition(",")
        media = header[5:].split(";", 1)[0] if header.startswith("data:") else "url"
        try:
            data = base64.b64decode(payload, validate=True) if ";base64" in header else payload.encode()
        except ValueError:
            data = b""
        digest = hashlib.sha256(data).hexdigest()[:12]
        parts.append(f"Fake image description: a {media} picture of {len(data)} bytes, digest {digest}.")
    return " ".join(parts)


class FakeBackend:
    """The fake answers; shared by the HTTP handler threads (thread-safe)."""

    def __init__(
        self,
        answer: str | Callable[[list[dict]], str] | None = None,
        fail_models: Iterable[str] | Mapping[str, int] = (),
        fail_status: int = 500,
        models: Iterable[str] = DEFAULT_MODELS,
        chunk_delay: float = 0.0,
        prompt_counting: str = "words",
        context_tokens: int | None = None,
        delay: float = 0.0,
        hang_seconds: float = 5.0,
    ):
        self.answer = answer
        # A busy server: every embedding and chat request waits this long before its answer.
        self.delay = delay
        # How long a simulated "timeout" outage holds a request before answering it anyway.
        self.hang_seconds = hang_seconds
        # Path ("embeddings" or "chat") -> what its next requests get, one entry each: an HTTP
        # status or "timeout" (FakeOpenAIServer.outage).
        self.outages: dict[str, list[int | str]] = {}
        self.outages_served = 0
        # The model's context window (None: unlimited): a chat request whose prompt tokens and
        # max_tokens pass it is refused as OpenAI refuses it (400 context_length_exceeded).
        self.context_tokens = context_tokens
        # How prompt tokens are counted: "words" (whitespace pieces, the default) or "bytes"
        # (UTF-8 bytes: as many tokens as any byte-level tokenizer can make of a text, the
        # costliest model a provider could run; the hold tests use it).
        self.prompt_counting = prompt_counting
        self.fail_status = fail_status
        self.fail_models: dict[str, int] = _fail_map(fail_models, fail_status)
        self.models = list(models)
        self.chunk_delay = chunk_delay
        self.requests: list[dict] = []
        # Model name -> dimension of its vectors (others: EMBEDDING_DIM), to serve two
        # embedding models of different dimensions (the model-migration tests).
        self.model_dimensions: dict[str, int] = {}
        self.streams: list[dict] = []
        self._lock = threading.Lock()
        self._counter = 0

    def is_ready(self) -> bool:
        return True

    def model_ids(self) -> list[str]:
        return list(self.models)

    def record(self, path: str, body: dict | None) -> None:
        with self._lock:
            self.requests.append({"path": path, "body": body})

    def embeddings(self, body: dict, texts: list[str]):
        self._wait_or_fail("embeddings")
        self._maybe_fail(body["model"])
        dim = self.model_dimensions.get(body["model"], EMBEDDING_DIM)
        return [fake_embedding(t, dim) for t in texts], sum(count_tokens(t) for t in texts)

    def chat(self, body: dict) -> dict:
        self._wait_or_fail("chat")
        self._maybe_fail(body["model"])
        text, usage, finish = self._answer_and_usage(body)
        return {
            "id": self._next_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish,
                    "logprobs": None,
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": usage,
        }

    def chat_stream(self, body: dict, emit: Callable[[dict], bool]) -> None:
        self._wait_or_fail("chat")
        self._maybe_fail(body["model"])
        text, usage, finish = self._answer_and_usage(body)
        base = {
            "id": self._next_id(),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"],
        }
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        record = {
            "sent_at": [],
            "words": len(text.split(" ")),
            "usage": usage,
            "finish_reason": finish,
            "client_left": False,
        }
        with self._lock:
            self.streams.append(record)
        for chunk in _stream_chunks(base, text, finish, usage if include_usage else None):
            if emit(chunk):
                record["client_left"] = True
                return
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                record["sent_at"].append(time.monotonic())
            if self.chunk_delay:
                time.sleep(self.chunk_delay)

    def _wait_or_fail(self, path: str) -> None:
        """The busy server's wait, then the next outage planned for `path`, if any."""
        if self.delay:
            time.sleep(self.delay)
        with self._lock:
            planned = self.outages.get(path) or []
            outcome = planned.pop(0) if planned else None
            if outcome not in (None, "ok"):
                self.outages_served += 1
        if outcome in (None, "ok"):
            return
        if outcome == "timeout":
            time.sleep(self.hang_seconds)  # the client has given up by now; answered anyway
        else:
            raise ApiError(
                int(outcome),
                "simulated outage: the server is busy",
                code="rate_limit_exceeded" if outcome == 429 else "server_busy",
            )

    def _maybe_fail(self, model: str) -> None:
        status = self.fail_models.get(model)
        if status is not None:
            raise ApiError(
                status,
                f"simulated failure for model '{model}'",
                code="rate_limit_exceeded" if status == 429 else "simulated_failure",
            )

    def _answer_and_usage(self, body: dict) -> tuple[str, dict, str]:
        messages = body["messages"]
        images = image_parts(messages)
        if images:
            # A vision request: described from the image's bytes, whatever `answer` says.
            text = describe_images(images)
        elif callable(self.answer):
            text = self.answer(messages)
        else:
            text = self.answer if self.answer is not None else default_answer(messages)
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        finish = "stop"
        if limit and len(text.split(" ")) > limit:
            text, finish = " ".join(text.split(" ")[:limit]), "length"
        count = count_tokens if self.prompt_counting == "words" else (lambda text: len(text.encode("utf-8")))
        prompt = sum(count(_content_text(m.get("content"))) for m in messages) + IMAGE_TOKENS * len(images)
        if self.context_tokens is not None and prompt + (limit or 0) > self.context_tokens:
            raise ApiError(
                400,
                f"This model's maximum context length is {self.context_tokens} tokens. However, "
                f"you requested {prompt + (limit or 0)} tokens ({prompt} in the messages, "
                f"{limit or 0} in the completion).",
                code="context_length_exceeded",
                param="messages",
            )
        completion = count_tokens(text)
        return (
            text,
            {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
            finish,
        )

    def _next_id(self) -> str:
        with self._lock:
            self._counter += 1
            return f"chatcmpl-fake{self._counter:06d}"


def _fail_map(fail_models: Iterable[str] | Mapping[str, int], status: int) -> dict[str, int]:
    if isinstance(fail_models, Mapping):
        return {str(k): int(v) for k, v in fail_models.items()}
    return {str(name): status for name in fail_models}


def _stream_chunks(base: dict, text: str, finish: str, usage: dict | None) -> Iterable[dict]:
    """OpenAI's chunk sequence: role, one word per chunk, finish, [usage]."""

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for i, word in enumerate(text.split(" ")):
        yield chunk({"content": word if i == 0 else " " + word})
    yield chunk({}, finish)
    if usage is not None:
        yield {**base, "choices": [], "usage": usage}


class FakeOpenAIServer:
    """The fake server on a loopback port, served from a background thread.

    Use as a context manager (or call :meth:`start` / :meth:`stop`).
    ``requests``, ``fail_models`` (model -> HTTP status) and ``answer`` may
    be read or changed while it runs.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **backend_options):
        """``backend_options`` are :class:`FakeBackend`'s: answer,
        fail_models (a set of names, or a name -> status mapping),
        fail_status, models, chunk_delay, prompt_counting, context_tokens, delay,
        hang_seconds."""
        self._backend_options = backend_options
        self.backend = FakeBackend(**backend_options)
        self._address = (host, port)
        self._httpd = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (valid once started)."""
        return self._httpd.base_url

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def requests(self) -> list[dict]:
        """Every request received, in order: ``{"path": ..., "body": dict | None}``."""
        return self.backend.requests

    @property
    def streams(self) -> list[dict]:
        """Every streamed answer, in order (see the module docstring)."""
        return self.backend.streams

    @property
    def fail_models(self) -> dict[str, int]:
        """Model name -> HTTP status it fails with (mutable)."""
        return self.backend.fail_models

    @fail_models.setter
    def fail_models(self, value: Iterable[str] | Mapping[str, int]) -> None:
        self.backend.fail_models = _fail_map(value, self.backend.fail_status)

    @property
    def answer(self):
        return self.backend.answer

    @answer.setter
    def answer(self, value: str | Callable[[list[dict]], str] | None) -> None:
        self.backend.answer = value

    def fail(self, model: str, status: int = 500) -> None:
        """Make every request naming ``model`` fail with ``status``."""
        self.backend.fail_models[model] = status

    def outage(self, n: int, status: int | str = 503, path: str = "embeddings", after: int = 0) -> None:
        """The next ``n`` requests to ``path`` ("embeddings" or "chat") answer ``status`` (an
        HTTP status, or "timeout": no answer within ``hang_seconds``), once ``after`` more
        have been answered as usual; then it recovers."""
        with self.backend._lock:
            self.backend.outages.setdefault(path, []).extend(["ok"] * after + [status] * n)

    @property
    def outages_served(self) -> int:
        """How many requests an outage answered so far."""
        return self.backend.outages_served

    @property
    def delay(self) -> float:
        return self.backend.delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self.backend.delay = seconds

    def recover(self, model: str | None = None) -> None:
        """Stop failing ``model`` (all models, and every planned outage, when None)."""
        if model is None:
            self.backend.outages.clear()
            self.backend.fail_models.clear()
        else:
            self.backend.fail_models.pop(model, None)

    def requests_to(self, path: str) -> list[dict]:
        """Recorded bodies sent to ``path`` (e.g. ``"/v1/embeddings"``), in order."""
        return [r["body"] for r in list(self.backend.requests) if r["path"] == path]

    def clear(self) -> None:
        """Forget the recorded requests and streams."""
        self.backend.requests.clear()
        self.backend.streams.clear()

    def reset(self) -> None:
        """Back to how it was started: its answer, delays, failures and models as given to the
        constructor, nothing recorded (for a server that several tests share in turn)."""
        self.backend.__init__(**self._backend_options)

    def start(self) -> FakeOpenAIServer:
        self._httpd = make_http_server(*self._address, self.backend)
        self._httpd.serve_in_background(name="fake-openai", poll_interval=0.05)
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.stop()
            self._httpd = None

    def serve_until_interrupted(self) -> None:
        """Block until Ctrl-C / SIGTERM (for the command line)."""
        stop = threading.Event()
        on_stop_signals(stop)
        wait_until_set(stop)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Deterministic fake OpenAI API server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--fail-model", action="append", default=[], help="model name that always fails (repeatable)")
    parser.add_argument("--fail-status", type=int, default=500)
    parser.add_argument("--answer", default=None, help="fixed chat answer")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.0, help="seconds between the chunks of a streamed answer"
    )
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(
        args.host,
        args.port,
        answer=args.answer,
        fail_models=args.fail_model,
        fail_status=args.fail_status,
        chunk_delay=args.chunk_delay,
    )
    with server:
        print(f"fake OpenAI server on {server.base_url}", flush=True)
        server.serve_until_interrupted()
    return 0


if __name__ == "__main__":
    sys.exit(main())
