"""llm.client, the provider boundary: what it makes of good and of broken provider answers.

Its calls read the provider's raw body (the openai client's `post()`, not its typed objects),
so these tests pin what the typed path used to guarantee: vectors, usage, streamed text,
and a clear ProviderError (never an exception of the parser) for whatever a provider sends.
Against the fake OpenAI server, and a tiny loopback server that answers what each test says.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from openai import OpenAI

from llm import client as llm
from llm.fake_server import EMBEDDING_DIM, fake_embedding


@pytest.fixture
def provider(settings, fake_llm):
    settings.EMBEDDING_DIMENSIONS = EMBEDDING_DIM
    return fake_llm


class _Scripted(BaseHTTPRequestHandler):
    script: dict = {}  # path -> (status, content type, list of body pieces sent with a pause between)

    def do_POST(self):  # http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, content_type, pieces = self.script[self.path]
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Connection", "close")
        self.end_headers()
        for piece in pieces:
            self.wfile.write(piece)
            self.wfile.flush()
            time.sleep(0.02)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted(settings):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.LLM_BASE_URL = f"http://127.0.0.1:{server.server_address[1]}/v1"
    settings.CHAT_FALLBACK_MODEL = ""
    _Scripted.script = {}
    yield _Scripted.script
    server.shutdown()
    server.server_close()


def _sse(*events) -> list[bytes]:
    return [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events]


def _delta(text: str) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def test_embed_reads_the_same_vectors_and_usage_as_the_typed_client(provider):
    result = llm.embed(["first text", "second text"])
    typed = OpenAI(base_url=provider.base_url, api_key="x").embeddings.create(
        model=result.model, input=["first text", "second text"], encoding_format="float"
    )
    assert result.vectors.dtype == np.float32 and result.vectors.shape == (2, EMBEDDING_DIM)
    assert np.allclose(result.vectors, np.asarray([d.embedding for d in typed.data], dtype=np.float32))
    assert np.allclose(result.vectors[0], np.asarray(fake_embedding("first text"), dtype=np.float32))
    assert result.total_tokens == typed.usage.total_tokens > 0 and result.provider == "local"
    assert provider.requests_to("/v1/embeddings")[0]["encoding_format"] == "float"


def test_chat_streams_the_text_usage_and_sampling_it_was_given(provider):
    provider.answer = "Twenty-eight days of holiday."
    stream = llm.chat(
        [{"role": "user", "content": "How much holiday?"}],
        temperature=0.2,
        max_tokens=50,
        sampling={"frequency_penalty": 0.3},
    )
    assert "".join(stream) == "Twenty-eight days of holiday." and stream.finish_reason == "stop"
    usage = stream.final_usage()
    assert usage.reported and usage.completion_tokens > 0 and usage.prompt_tokens > 0
    body = provider.requests_to("/v1/chat/completions")[-1]
    assert body["frequency_penalty"] == 0.3 and body["stream"] is True and body["max_tokens"] == 50
    assert body["stream_options"] == {"include_usage": True}


def test_a_stream_split_mid_line_arrives_whole(scripted):
    event = json.dumps(_delta("Hello there"))
    pieces = [
        b"data: " + event[:10].encode(),
        event[10:].encode() + b"\n\n",
        *_sse(_delta(" again"), {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}, "[DONE]"),
    ]
    scripted["/v1/chat/completions"] = (200, "text/event-stream", pieces)
    stream = llm.chat([{"role": "user", "content": "hi"}], temperature=0, max_tokens=5)
    assert list(stream) == ["Hello there", " again"]
    assert stream.final_usage().reported and stream.final_usage().total_tokens == 5


@pytest.mark.parametrize(
    "events, message",
    [
        ((_delta("Half an"), {"error": {"message": "out of memory"}}), "failed mid-answer: out of memory"),
        ((_delta("Half an"), "{not json"), "malformed stream"),
    ],
)
def test_a_broken_stream_is_a_provider_error(scripted, events, message):
    scripted["/v1/chat/completions"] = (200, "text/event-stream", _sse(*events))
    stream = llm.chat([{"role": "user", "content": "hi"}], temperature=0, max_tokens=5)
    received = []
    with pytest.raises(llm.ProviderError) as failed:
        for text in stream:
            received.append(text)
    assert received == ["Half an"] and message in failed.value.message and failed.value.transient


@pytest.mark.parametrize(
    "status, body, code, transient",
    [
        (200, b"<html>a proxy's page</html>", "provider_error", False),
        (200, b'{"data": [{"index": 0}]}', "provider_error", False),
        (
            200,
            b'{"data": [{"index": 0, "embedding": [0.5, 0.5]}], "usage": {"total_tokens": 2}}',
            "embedding_dimension",
            False,
        ),
        (503, b'{"error": {"message": "busy"}}', "provider_unavailable", True),
        (400, b'{"error": {"message": "no such model"}}', "provider_error", False),
    ],
)
def test_a_bad_embedding_answer_is_a_clear_provider_error(scripted, status, body, code, transient):
    scripted["/v1/embeddings"] = (status, "application/json", [body])
    with pytest.raises(llm.ProviderError) as failed:
        llm.embed(["text"])
    assert failed.value.code == code and failed.value.transient is transient


def test_a_stream_stopped_before_its_usage_is_estimated_as_the_hold_counts(provider):
    """Found using the product: the answer guard stopped the review's /v1 stream (a system
    message of 75 random 110-character words) before the provider's usage arrived, and the
    estimate counted the prompt with the embedding model's WordPiece: 317 tokens for ~7,000.
    The estimate is the hold's bound, never below what a byte-counting provider charges."""
    import random
    import string

    rng = random.Random(22)
    words = " ".join("".join(rng.choice(string.ascii_letters) for _ in range(110)) for _ in range(75))
    provider.backend.prompt_counting = "bytes"
    provider.answer = " ".join(f"word{i}" for i in range(40))
    messages = [{"role": "system", "content": words}, {"role": "user", "content": "Say hi."}]
    stream = llm.chat(messages, temperature=0, max_tokens=30)
    for _ in zip(range(3), stream):  # the reader stops after three pieces
        pass
    usage = stream.final_usage()
    assert not usage.reported
    assert usage.prompt_tokens >= len((words + "Say hi.").encode())  # what the provider would report
    assert 3 <= usage.completion_tokens <= 30
