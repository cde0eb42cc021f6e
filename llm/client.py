"""The one provider boundary: every model call in the product goes through here, always
through the official `openai` client, to LLM_BASE_URL (the bundled local models when unset).
"""

from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx2
import numpy as np
import openai
from django.conf import settings

from core.errors import GroundworkError
from llm.embedding_specs import Purpose, embedding_spec
from llm.error_codes import ProviderErrorCode

logger = logging.getLogger("groundwork.llm")

EMBEDDING_BATCH_LIMIT = 96


class ProviderError(GroundworkError):
    """A model call failed. `transient` errors (network, timeout, 429, 5xx) may be retried."""

    def __init__(self, code: str, message: str, *, transient: bool):
        super().__init__(code, message, status=502)
        self.transient = transient


@dataclass(frozen=True)
class Embeddings:
    vectors: np.ndarray  # float32, shape (n, dimensions)
    total_tokens: int
    model: str
    provider: str


def base_url() -> str:
    return settings.LLM_BASE_URL or f"http://127.0.0.1:{settings.LOCAL_LLM_PORT}/v1"


def provider_name() -> str:
    host = urlparse(base_url()).hostname or "unknown"
    return "local" if host in ("127.0.0.1", "localhost", "::1") else host


@functools.lru_cache(maxsize=4)
def _client(url: str, api_key: str, timeout: float) -> openai.OpenAI:
    # Retries are ours (with the fallback model for chat), so the SDK's are off.
    return openai.OpenAI(base_url=url, api_key=api_key, timeout=timeout, max_retries=0)


def client(timeout: float | None = None) -> openai.OpenAI:
    return _client(base_url(), settings.LLM_API_KEY or "local", timeout or settings.LLM_TIMEOUT_SECONDS)


# What a call can fail with: the SDK's errors, and its HTTP client's (httpx2) own while a response body is read
# (a model server killed mid-stream: the SDK wraps only what happens before the body).
CALL_ERRORS = (openai.OpenAIError, httpx2.HTTPError)


def _classify(exc: Exception) -> ProviderError:
    # A timeout first (the SDK's is a connection error too): a busy server, not an absent one.
    if isinstance(exc, (openai.APITimeoutError, httpx2.TimeoutException)):
        return ProviderError(
            ProviderErrorCode.PROVIDER_UNAVAILABLE,
            "The model provider did not answer in time (it is busy or overloaded).",
            transient=True,
        )
    if isinstance(exc, (openai.APIConnectionError, httpx2.TransportError)):
        return ProviderError(
            ProviderErrorCode.PROVIDER_UNAVAILABLE, "The model provider could not be reached.", transient=True
        )
    if isinstance(exc, openai.RateLimitError):
        return ProviderError(
            ProviderErrorCode.PROVIDER_UNAVAILABLE, "The model provider is rate limiting requests.", transient=True
        )
    if isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
        return ProviderError(
            ProviderErrorCode.PROVIDER_UNAVAILABLE, f"The model provider failed ({exc.status_code}).", transient=True
        )
    if isinstance(exc, openai.APIStatusError):
        return ProviderError(
            ProviderErrorCode.PROVIDER_ERROR,
            f"The model provider refused the request ({exc.status_code}): {exc.message}",
            transient=False,
        )
    return ProviderError(
        ProviderErrorCode.PROVIDER_ERROR, f"Unexpected answer from the model provider: {exc}", transient=False
    )


RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"  # the SDK's own switch: "stream" = hand back unread


def _post(path: str, body: dict, *, timeout: float | None = None):
    """POST `body` through the openai client (its base URL, key, timeout, and failures raised
    as the SDK's exceptions) and return the SDK's unparsed response, its body not yet read.
    The typed path cost more CPU than the rest of a chat turn's model calls together: the
    request is walked against the SDK's parameter types and every float of an embedding and
    every chunk of a stream become an object (docs/benchmarks.md, Chat). Close it when done."""
    return client(timeout).post(path, body=body, cast_to=object, options={"headers": {RAW_RESPONSE_HEADER: "stream"}})


def embed(
    texts: list[str],
    *,
    model: str | None = None,
    dimensions: int | None = None,
    purpose: Purpose = Purpose.PASSAGE,
    timeout: float | None = None,
) -> Embeddings:
    """Embed up to EMBEDDING_BATCH_LIMIT texts in one request with `model` (EMBEDDING_MODEL
    by default), each text prefixed as the model wants for `purpose` (a search query or a
    document's text: llm/embedding_specs.py). Checks count and dimension of what comes back:
    `dimensions`, by default EMBEDDING_DIMENSIONS (an account searching with an older model
    passes that model's). The tokens are the provider's, prefixes included. `timeout`: how
    long the answer may take (LLM_TIMEOUT_SECONDS by default; a document's batch waits
    EMBEDDING_TIMEOUT_SECONDS, queued behind others on a busy server)."""
    if not texts or len(texts) > EMBEDDING_BATCH_LIMIT:
        raise ValueError(f"embed() takes 1-{EMBEDDING_BATCH_LIMIT} texts, got {len(texts)}")
    model = model or settings.EMBEDDING_MODEL
    texts = embedding_spec(model).prefixed(list(texts), Purpose(purpose))
    try:
        response = _post("/embeddings", {"model": model, "input": texts, "encoding_format": "float"}, timeout=timeout)
        try:
            content = response.read()
        finally:
            response.close()
    except CALL_ERRORS as exc:
        raise _classify(exc) from exc
    try:
        body = json.loads(content)
        data = sorted(body["data"], key=lambda item: item["index"])
        vectors = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        usage = body.get("usage") or {}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ProviderError(
            ProviderErrorCode.PROVIDER_ERROR, f"Unexpected answer from the model provider: {exc!r}", transient=False
        ) from exc
    expected = (len(texts), int(dimensions or settings.EMBEDDING_DIMENSIONS))
    if vectors.shape != expected:
        raise ProviderError(
            ProviderErrorCode.EMBEDDING_DIMENSION,
            f"The embedding model returned vectors of shape {vectors.shape}, expected {expected}: "
            "check EMBEDDING_MODEL and EMBEDDING_DIMENSIONS.",
            transient=False,
        )
    return Embeddings(
        vectors=vectors, total_tokens=int(usage.get("total_tokens") or 0), model=model, provider=provider_name()
    )


def with_retries(call, *, tries: int = 3, first_delay: float = 1.0, on_retry=None, deadline: float | None = None):
    """Run `call()`, retrying transient ProviderErrors with exponential backoff; no retry
    starts after `deadline` (time.monotonic()). `on_retry(exc, attempt)`, when given, hears of
    each transient error that is retried."""
    delay = first_delay
    for attempt in range(1, tries + 1):
        try:
            return call()
        except ProviderError as exc:
            if not exc.transient or attempt == tries:
                raise
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise
            logger.warning("transient provider error (try %d/%d): %s", attempt, tries, exc.message)
            if on_retry is not None:
                on_retry(exc, attempt)
            time.sleep(delay)
            delay *= 2


# --- chat -----------------------------------------------------------------------------------


@dataclass
class ChatUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reported: bool = False  # False: the provider sent no usage, so these are our estimates

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class ChatStream:
    """Tokens of one answer as they arrive; `usage` and `model` are final once exhausted."""

    messages: list[dict]
    temperature: float
    max_tokens: int
    cancelled: object = None  # a threading.Event; when set, generation stops at the next token
    sampling: dict | None = None  # extra decoding settings (penalties), sent as they are
    usage: ChatUsage | None = None
    model: str = ""
    provider: str = ""
    finish_reason: str = ""  # the provider's: "stop", or "length" when cut at max_tokens
    generated: list = field(default_factory=list)  # every piece of text the model produced

    def __iter__(self):
        models = [settings.CHAT_MODEL]
        if settings.CHAT_FALLBACK_MODEL and settings.CHAT_FALLBACK_MODEL != settings.CHAT_MODEL:
            models.append(settings.CHAT_FALLBACK_MODEL)
        last_error = None
        for model in models:
            emitted = False
            try:
                for text in self._stream(model):
                    emitted = True
                    yield text
                return
            except CALL_ERRORS as exc:
                last_error = _classify(exc)
                logger.warning("chat model %s failed: %s", model, last_error.message)
                if emitted:
                    # Half an answer was already shown: retrying elsewhere would repeat it.
                    break
        # What the provider did, in the person's words (busy, unreachable, failing).
        why = last_error.message if last_error is not None else "The model provider is unavailable."
        raise ProviderError(
            ProviderErrorCode.PROVIDER_UNAVAILABLE,
            f"The answer could not be generated: {why[:1].lower()}{why[1:]} Please try again in a moment.",
            transient=True,
        ) from last_error

    def _stream(self, model: str):
        self.model, self.provider = model, provider_name()
        self.generated = []
        body = {
            "model": model,
            "messages": self.messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            **(self.sampling or {}),
        }
        response = _post("/chat/completions", body)
        try:
            for chunk in _events(response):
                usage = chunk.get("usage")
                if usage:
                    self.usage = ChatUsage(
                        int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), reported=True
                    )
                for choice in chunk.get("choices") or ():
                    self.finish_reason = choice.get("finish_reason") or self.finish_reason
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        self.generated.append(text)
                        yield text
                if self.cancelled is not None and self.cancelled.is_set():
                    break
        finally:
            response.close()

    def final_usage(self) -> ChatUsage:
        """The provider's usage, or, when the stream ended without one (cancelled, or stopped
        by its reader), our count of the prompt and of everything the model generated."""
        return self.usage or self._estimate("".join(self.generated), len(self.generated))

    def _estimate(self, answer: str, chunks: int) -> ChatUsage:
        """No usage from the provider (a cancelled stream, or one its reader stopped, ends
        before it): counted as the hold counted it (llm/chat_tokens.py: the bundled model's
        own tokenizer, else UTF-8 bytes), so an answer cut short is never charged below what
        its prompt cost. The embedding model's WordPiece, counted here before, read a 7,000-
        token prompt of long words as 317."""
        from llm import chat_tokens

        prompt = chat_tokens.prompt_tokens_bound([_text(m.get("content")) for m in self.messages])
        completion = min(self.max_tokens, max(chunks, chat_tokens.text_tokens_bound(answer) if answer else 0))
        return ChatUsage(prompt_tokens=prompt, completion_tokens=completion)


def _text(content) -> str:
    """A message's text: a string, or OpenAI content parts' text."""
    if isinstance(content, list):
        return " ".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _events(response):
    """The JSON payloads of an OpenAI-style SSE stream, up to `data: [DONE]` (one JSON
    document per `data:` line, as OpenAI and compatible servers send them). The bytes are
    split into lines here: the HTTP client's line iterator decoded and re-split every chunk."""
    rest = b""
    for block in response.iter_bytes():
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            try:
                event = json.loads(data)
            except ValueError as exc:
                raise ProviderError(
                    ProviderErrorCode.PROVIDER_UNAVAILABLE,
                    "The model provider sent a malformed stream.",
                    transient=True,
                ) from exc
            if isinstance(event, dict) and event.get("error"):
                error = event["error"]
                message = error.get("message", error) if isinstance(error, dict) else error
                raise ProviderError(
                    ProviderErrorCode.PROVIDER_UNAVAILABLE,
                    f"The model provider failed mid-answer: {message}",
                    transient=True,
                )
            if isinstance(event, dict):
                yield event


def chat(
    messages: list[dict], *, temperature: float, max_tokens: int, cancelled=None, sampling: dict | None = None
) -> ChatStream:
    """A streamed answer from CHAT_MODEL, or CHAT_FALLBACK_MODEL with the same parameters
    when the first fails before answering. Iterate it for text; then `final_usage()`.
    `sampling`: extra decoding parameters for the request body (e.g. frequency_penalty)."""
    return ChatStream(
        messages=messages, temperature=temperature, max_tokens=max_tokens, cancelled=cancelled, sampling=sampling
    )


# --- images ---------------------------------------------------------------------------------

DESCRIBE_IMAGE_PROMPT = (
    "Describe this image for a search index: what it shows, and any text, numbers, labels "
    "or chart values in it. Plain sentences, no preamble."
)


@dataclass(frozen=True)
class ImageDescription:
    text: str
    usage: ChatUsage
    model: str
    provider: str


def describe_image(data: bytes, content_type: str, *, max_tokens: int, model: str | None = None) -> ImageDescription:
    """A description of an image by VISION_MODEL (any OpenAI-compatible vision model), the
    image sent inline as a data URL. `usage` is the provider's (reported=True), or our
    count of the prompt and the answer when it sends none (the image itself then counts 0)."""
    import base64

    model = model or settings.VISION_MODEL
    if not model:
        raise ValueError("describe_image() needs VISION_MODEL")
    url = f"data:{content_type};base64,{base64.b64encode(data).decode('ascii')}"
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": DESCRIBE_IMAGE_PROMPT},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]
    try:
        response = client().chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=0.2
        )
    except CALL_ERRORS as exc:
        raise _classify(exc) from exc
    text = ((response.choices[0].message.content if response.choices else "") or "").strip()
    if response.usage:
        usage = ChatUsage(
            int(response.usage.prompt_tokens or 0), int(response.usage.completion_tokens or 0), reported=True
        )
    else:
        from llm.tokens import count_tokens

        usage = ChatUsage(count_tokens(DESCRIBE_IMAGE_PROMPT), count_tokens(text))
    return ImageDescription(text=text, usage=usage, model=model, provider=provider_name())
