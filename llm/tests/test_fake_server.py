"""The fake OpenAI server, driven by the official openai client.

Plain pytest functions: no database, no Django.
"""

import json
import math
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from llm.fake_server import EMBEDDING_DIM, FakeOpenAIServer, fake_embedding

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake():
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
def client(fake):
    # No retries: failure tests count requests and must stay fast.
    return OpenAI(base_url=fake.base_url, api_key="x", max_retries=0, timeout=10)


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b))


def test_base_url_is_loopback_v1(fake):
    assert fake.base_url == f"http://127.0.0.1:{fake.port}/v1"


def test_model_list(client):
    ids = [m.id for m in client.models.list()]
    assert ids == ["smollm2-135m-instruct", "all-minilm-l6-v2"]


def test_embeddings_float_and_base64_agree(client):
    texts = ["The cat sat on the mat", "Quarterly revenue grew"]
    as_float = client.embeddings.create(model="emb", input=texts, encoding_format="float")
    as_default = client.embeddings.create(model="emb", input=texts)  # client sends base64
    assert [d.index for d in as_float.data] == [0, 1]
    for f, b in zip(as_float.data, as_default.data):
        assert len(f.embedding) == EMBEDDING_DIM
        assert math.isclose(math.sqrt(sum(x * x for x in f.embedding)), 1.0, rel_tol=1e-6)
        assert all(math.isclose(x, y, abs_tol=1e-6) for x, y in zip(f.embedding, b.embedding))
    assert as_float.usage.prompt_tokens == as_float.usage.total_tokens == 9
    assert as_float.model == "emb"


def test_embeddings_are_deterministic_and_similarity_aware(client):
    first = (
        client.embeddings.create(model="emb", input="refund policy for annual plans", encoding_format="float")
        .data[0]
        .embedding
    )
    again = (
        client.embeddings.create(model="emb", input="refund policy for annual plans", encoding_format="float")
        .data[0]
        .embedding
    )
    assert first == again
    assert first == pytest.approx(fake_embedding("refund policy for annual plans"))
    similar = fake_embedding("What is the refund policy for annual plans?")
    unrelated = fake_embedding("the cat sleeps on a warm windowsill")
    assert cosine(first, similar) > cosine(first, unrelated) + 0.3


def test_empty_text_still_gets_a_unit_vector():
    vector = fake_embedding("  ")
    assert math.isclose(sum(x * x for x in vector), 1.0)


def test_chat_default_answer_and_usage(client):
    resp = client.chat.completions.create(
        model="chat-a",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "How do I reset my password?"},
        ],
    )
    assert resp.choices[0].message.content == "Fake answer: How do I reset my password?"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.model == "chat-a"
    assert resp.usage.prompt_tokens == 2 + 6
    assert resp.usage.completion_tokens == 8
    assert resp.usage.total_tokens == 16


def test_chat_answer_is_configurable(fake, client):
    fake.answer = "Fixed reply."
    msg = [{"role": "user", "content": "anything"}]
    assert client.chat.completions.create(model="m", messages=msg).choices[0].message.content == "Fixed reply."
    fake.answer = lambda messages: f"{len(messages)} message(s)"
    assert client.chat.completions.create(model="m", messages=msg).choices[0].message.content == "1 message(s)"


def test_chat_stream_with_usage_matches_non_streamed(client):
    messages = [{"role": "user", "content": "Summarise the onboarding guide for new staff please"}]
    whole = client.chat.completions.create(model="m", messages=messages)
    chunks = list(
        client.chat.completions.create(
            model="m", messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices == []
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_without_usage_has_no_usage_chunk(client):
    chunks = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_max_tokens_truncates_the_answer(client):
    resp = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "one two three four five"}], max_tokens=3
    )
    assert resp.choices[0].message.content == "Fake answer: one"
    assert resp.usage.completion_tokens == 3


def test_failing_models_answer_500_or_429():
    with FakeOpenAIServer(fail_models={"down": 500, "busy": 429}) as srv:
        client = OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        msg = [{"role": "user", "content": "hi"}]
        with pytest.raises(openai.InternalServerError) as err:
            client.chat.completions.create(model="down", messages=msg)
        assert err.value.status_code == 500
        assert "simulated failure" in err.value.message
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="busy", messages=msg, stream=True)
        with pytest.raises(openai.RateLimitError):
            client.embeddings.create(model="busy", input="x")
        assert client.chat.completions.create(model="fine", messages=msg).choices


def test_failures_can_be_switched_at_runtime(fake, client):
    msg = [{"role": "user", "content": "hi"}]
    fake.fail("primary")
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="primary", messages=msg)
    fallback = client.chat.completions.create(model="fallback", messages=msg)
    assert fallback.choices[0].message.content.startswith("Fake answer")
    fake.recover("primary")
    assert client.chat.completions.create(model="primary", messages=msg).choices
    fake.fail_models = {"a", "b"}
    assert fake.fail_models == {"a": 500, "b": 500}


def test_client_retries_are_visible_in_recorded_requests(fake):
    fake.fail("flaky", 429)
    client = OpenAI(base_url=fake.base_url, api_key="x", max_retries=1)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="flaky", messages=[{"role": "user", "content": "hi"}])
    assert [b["model"] for b in fake.requests_to("/v1/chat/completions")] == ["flaky", "flaky"]


def test_every_request_body_is_recorded(fake, client):
    fake.fail("down")
    client.embeddings.create(model="emb", input=["a", "b"])
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "q"}], temperature=0.1, max_tokens=5
    )
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="down", messages=[{"role": "user", "content": "q"}])
    client.models.list()
    assert [r["path"] for r in fake.requests] == [
        "/v1/embeddings",
        "/v1/chat/completions",
        "/v1/chat/completions",
        "/v1/models",
    ]
    assert fake.requests[0]["body"]["input"] == ["a", "b"]
    assert fake.requests[0]["body"]["encoding_format"] == "base64"
    chat = fake.requests_to("/v1/chat/completions")
    assert chat[0]["temperature"] == 0.1 and chat[0]["max_tokens"] == 5
    assert chat[1]["model"] == "down"
    assert fake.requests[3]["body"] is None
    fake.clear()
    assert fake.requests == []


def test_bad_requests_get_openai_errors(fake, client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="m", messages=[])
    assert err.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="emb", input=[1, 2, 3])
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="emb", input="x", encoding_format="int8")
    status, body = raw_post(fake.base_url + "/embeddings", b"{not json")
    assert status == 400 and body["error"]["message"].startswith("We could not parse")
    status, body = raw_post(fake.base_url + "/embeddings", b'{"input": "no model"}')
    assert status == 400 and body["error"]["param"] == "model"
    status, body = raw_post(fake.base_url + "/nope", b"{}")
    assert status == 404 and body["error"]["code"] == "unknown_url"
    with pytest.raises(openai.NotFoundError):
        client.get("/does-not-exist", cast_to=object)


def test_healthz(fake):
    with urllib.request.urlopen(fake.base_url.removesuffix("/v1") + "/healthz", timeout=5) as resp:
        assert json.load(resp) == {"status": "ok"}


def test_runs_as_a_module(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm.fake_server", "--port", "0", "--answer", "pong"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("fake OpenAI server on http://127.0.0.1:")
        client = OpenAI(base_url=line.split(" on ", 1)[1].strip(), api_key="x", max_retries=0)
        resp = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "ping"}])
        assert resp.choices[0].message.content == "pong"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def raw_post(url, data: bytes):
    """POST raw bytes; returns (status, parsed JSON body)."""
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def test_abandoned_stream_does_not_break_the_server(fake, client):
    fake.answer = " ".join(f"w{i}" for i in range(200))
    fake.backend.chunk_delay = 0.01
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "long please"}], stream=True
    )
    for i, _chunk in enumerate(stream):
        if i == 3:
            break
    stream.close()
    fake.answer = "short"
    resp = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}])
    assert resp.choices[0].message.content == "short"


def test_unknown_paths_are_recorded_too(fake):
    status, _body = raw_post(fake.base_url + "/completions", b'{"prompt": "legacy"}')
    assert status == 404
    assert fake.requests == [{"path": "/v1/completions", "body": None}]
