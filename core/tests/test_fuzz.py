"""Property-based fuzzing of what schemathesis's schema walk does not reach: /v1
chat bodies with arbitrary content parts and numbers, and pagination cursors on every
list endpoint. Never a 5xx; every 4xx in the contract's JSON error shape."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.tests.factories import make_api_key

pytestmark = pytest.mark.slow

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
PART = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": JSON}),
    st.fixed_dictionaries({"type": st.sampled_from(["image_url", "input_audio", "file", ""]), "text": JSON}),
    st.dictionaries(st.sampled_from(["type", "text", "image_url"]), JSON, max_size=3),
    JSON,
)
CONTENT = st.one_of(st.text(max_size=200), st.none(), st.lists(PART, min_size=1, max_size=4), JSON)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]), "content": CONTENT}
)
QUESTION = st.fixed_dictionaries({"role": st.just("user"), "content": CONTENT})
# Mostly well-formed around the part being fuzzed, so the body reaches the code that reads
# content parts; sometimes anything at all.
BODY = st.one_of(
    st.fixed_dictionaries(
        {
            "model": st.just("groundwork"),
            "messages": st.tuples(st.lists(MESSAGE, max_size=3), QUESTION).map(lambda t: [*t[0], t[1]]),
        },
        optional={
            "max_tokens": JSON,
            "max_completion_tokens": JSON,
            "temperature": JSON,
            "stream": st.booleans(),
            "user": JSON,
            "stream_options": JSON,
        },
    ),
    st.fixed_dictionaries({"model": JSON, "messages": JSON}, optional={"stream": JSON, "max_tokens": JSON}),
)

QUERY = st.dictionaries(st.sampled_from(["o", "r", "p", "x", ""]), st.text(max_size=30), max_size=3)
CURSOR = st.one_of(
    st.text(max_size=60),
    QUERY.map(
        lambda q: base64.b64encode("&".join(f"{k}={v}" for k, v in q.items()).encode("utf-8", "surrogatepass")).decode()
    ),
)
LISTS = ["/api/v1/documents/", "/api/v1/conversations/", "/api/v1/audit/", "/api/v1/credits/", "/api/v1/collections/"]


def _assert_contract(response):
    assert response.status_code < 500, (response.status_code, response.content[:300])
    if response.status_code >= 400:
        assert set(response.json()) == {"error"} and response.json()["error"]["code"]


@pytest.fixture
def key_a(account_a):
    return make_api_key(account_a)


def test_v1_chat_bodies_never_give_a_server_error(client, account_a, key_a, fake_llm, settings_override):
    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(body=BODY)
    def check(body):
        response = client.post(
            "/v1/chat/completions",
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key_a}",
        )
        if body.get("stream") is True and response.status_code == 200:
            b"".join(response.streaming_content)
            return
        _assert_contract(response)

    check()


def test_pagination_cursors_never_give_a_server_error(client_a):
    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(path=st.sampled_from(LISTS), cursor=CURSOR, page_size=st.one_of(st.none(), st.text(max_size=6)))
    def check(path, cursor, page_size):
        params = {"cursor": cursor, **({"page_size": page_size} if page_size is not None else {})}
        if "\x00" in cursor + (page_size or ""):
            return  # refused as malformed before any view: core/tests/test_bad_input.py
        _assert_contract(client_a.get(path, params))

    check()


@pytest.fixture
def settings_override(settings):
    # Many turns from one key in a few seconds: the chat rate limit is not what is fuzzed here.
    settings.CHAT_RATE_PER_USER = settings.CHAT_RATE_PER_ACCOUNT = "100000/min"
    return settings
