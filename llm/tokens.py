"""Token counting with the embedding model's own tokenizer (all-MiniLM-L6-v2's WordPiece),
from the tokenizer.json kept in llm/assets. Used for chunk token counts and budgets."""
from __future__ import annotations

import functools
from pathlib import Path

TOKENIZER_PATH = Path(__file__).resolve().parent / "assets" / "all-MiniLM-L6-v2" / "tokenizer.json"


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


def count_tokens_batch(texts: list[str]) -> list[int]:
    return [len(e.ids) for e in _tokenizer().encode_batch(texts)]
