"""The shared OpenAI HTTP layer, with a backend small enough to make it fail on purpose.

What the fake and the local server answer is tested in their own files; these are the
cases neither can produce on demand: not ready yet, and a stream that fails before or
after its first chunk. Plain pytest functions: no database, no Django.
"""

import json
import urllib.error
import urllib.request

import pytest

from llm.openai_http import ApiError, make_http_server

CHUNK = {
    "id": "c1",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}],
}


class StubBackend:
    def __init__(self):
        self.ready = True
        self.stream_failure = None  # (chunks sent first, exception)

    def is_ready(self):
        return self.ready

    def model_ids(self):
        return ["m"]

    def record(self, path, body):
        pass

    def embeddings(self, body, texts):
        return [[1.0, 0.0]] * len(texts), len(texts)

    def chat(self, body):
        return {"object": "chat.completion", "choices": []}

    def chat_stream(self, body, emit):
        sent_first, error = self.stream_failure
        if sent_first:
            emit(CHUNK)
        raise error


@pytest.fixture
def stub():
    backend = StubBackend()
    server = make_http_server("127.0.0.1", 0, backend)
    server.serve_in_background(name="stub-openai", poll_interval=0.05)
    try:
        yield backend, server.base_url
    finally:
        server.stop()


def post(url, body: dict):
    """POST JSON; returns (status, content type, raw body)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_not_ready_answers_503_while_healthz_says_loading(stub):
    backend, base_url = stub
    backend.ready = False
    status, _type, body = post(base_url + "/embeddings", {"model": "m", "input": "x"})
    assert status == 503 and json.loads(body)["error"]["code"] == "not_ready"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(base_url.removesuffix("/v1") + "/healthz", timeout=5)
    assert err.value.code == 503 and json.load(err.value) == {"status": "loading"}


def test_stream_failing_before_its_first_chunk_gets_a_status_code(stub):
    backend, base_url = stub
    backend.stream_failure = (False, ApiError(429, "slow down"))
    status, content_type, body = post(base_url + "/chat/completions", STREAM)
    assert status == 429 and content_type == "application/json"
    assert json.loads(body) == {
        "error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": None}
    }


def test_stream_failing_midway_reports_the_error_in_band(stub):
    backend, base_url = stub
    backend.stream_failure = (True, RuntimeError("boom"))
    status, content_type, body = post(base_url + "/chat/completions", STREAM)
    assert status == 200 and content_type.startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in body.split("\n\n") if line]
    assert json.loads(events[0]) == CHUNK
    assert json.loads(events[1])["error"] == {
        "message": "internal error: boom",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert events[2] == "[DONE]"
