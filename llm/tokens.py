"""Token counting with the embedding model's own tokenizer (all-MiniLM-L6-v2's WordPiece),
from the tokenizer.json kept in llm/assets. Used for chunk token counts and budgets."""

from __future__ import annotations

import functools

from llm.local_models import TOKENIZER_PATH


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(text: str) -> int:
    """Tokens the embedding model sees for `text`, special tokens included."""
    return len(_tokenizer().encode(text).ids)
