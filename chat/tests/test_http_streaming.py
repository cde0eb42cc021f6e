"""HTTP streams that stream: `POST /api/v1/chat/?stream=1` (or `Accept: text/event-stream`)
and /v1 with `stream: true`, served by the real ASGI app under daphne (pytest-django's
live_server is WSGI), with a deliberately slow fake model server in this process. The model
server records when it sent each chunk, so "arrived before the model finished" is a
comparison of two monotonic clocks in one process, not a wall-clock guess."""

from __future__ import annotations

import json
import time

import httpx2
import openai
import pytest

from accounts.tests.factories import make_api_key
from billing import references
from billing.models import CreditHold, CreditLedgerEntry, HoldStatus
from chat.models import Message
from core.tenancy import account_context

pytestmark = pytest.mark.system

CHUNK_DELAY = 0.3  # seconds the fake model takes per chunk
SLOW_ANSWER = "Everyone gets twenty-eight days of paid holiday [Document 1]."  # 9 chunks: ~2.7 s
LONG_ANSWER = " ".join(f"word{i}" for i in range(40))  # ~12 s if nobody stopped it
QUESTION = "What is our holiday policy?"


@pytest.fixture
def fake_llm(session_model_server, settings):
    """The model server the shared daphne was started pointing at, reset for each test."""
    session_model_server.reset()
    settings.LLM_BASE_URL, settings.LLM_BUNDLED = session_model_server.base_url, False
    yield session_model_server
    session_model_server.reset()


@pytest.fixture(scope="module")
def daphne(session_daphne):
    """daphne serving config.asgi on the test database, the way `make run` serves the app."""
    return f"http://127.0.0.1:{session_daphne[1]}"


@pytest.fixture
def key_a(account_a):
    return make_api_key(account_a)


def _events(response):
    """(arrival time, JSON payload or "[DONE]") of each server-sent event, as it arrives."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[6:]
            yield time.monotonic(), data if data == "[DONE]" else json.loads(data)


def _stream_request(how: str, daphne: str, key: str) -> dict:
    auth = {"Authorization": f"Bearer {key}"}
    if how == "rest ?stream=1":
        return dict(url=f"{daphne}/api/v1/chat/?stream=1", json={"message": QUESTION}, headers=auth)
    if how == "rest Accept":
        return dict(
            url=f"{daphne}/api/v1/chat/", json={"message": QUESTION}, headers={**auth, "Accept": "text/event-stream"}
        )
    return dict(
        url=f"{daphne}/v1/chat/completions",
        headers=auth,
        json={"model": "groundwork", "stream": True, "messages": [{"role": "user", "content": QUESTION}]},
    )


def _token_text(how: str, event) -> str:
    if how.startswith("rest"):
        return event["text"] if event["type"] == "chat.token" else ""
    return "".join(c["delta"].get("content") or "" for c in event.get("choices", [])) if event != "[DONE]" else ""


@pytest.mark.django_db(transaction=True)  # daphne reads what the test wrote
@pytest.mark.parametrize("how", ["rest ?stream=1", "rest Accept"])
def test_rest_chat_sends_each_token_while_the_model_is_still_writing(daphne, key_a, handbook, fake_llm, how):
    fake_llm.answer, fake_llm.backend.chunk_delay = SLOW_ANSWER, CHUNK_DELAY
    with httpx2.Client(timeout=30) as http, http.stream("POST", **_stream_request(how, daphne, key_a)) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = list(_events(response))
    sent = fake_llm.streams[-1]["sent_at"]
    assert len(sent) == fake_llm.streams[-1]["words"] >= 6
    tokens = [(at, e["text"]) for at, e in events if e["type"] == "chat.token"]
    assert tokens[0][0] < sent[-1], "the first token waited for the whole answer"
    assert len(tokens) > 1 and "".join(text for _, text in tokens) == SLOW_ANSWER
    assert events[0][1]["type"] == "chat.sources" and events[-1][1]["type"] == "chat.done"


@pytest.mark.django_db(transaction=True)
def test_v1_stream_sends_each_chunk_while_the_model_is_still_writing(daphne, account_a, key_a, handbook, fake_llm):
    fake_llm.answer, fake_llm.backend.chunk_delay = SLOW_ANSWER, CHUNK_DELAY
    sdk = openai.OpenAI(base_url=f"{daphne}/v1", api_key=key_a, max_retries=0)
    arrivals = []
    for chunk in sdk.chat.completions.create(
        model="groundwork",
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": QUESTION}],
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append((time.monotonic(), chunk.choices[0].delta.content))
        last = chunk
    sent = fake_llm.streams[-1]["sent_at"]
    assert len(sent) == fake_llm.streams[-1]["words"] >= 6
    assert arrivals[0][0] < sent[-1], "the first content chunk waited for the whole answer"
    assert "".join(text for _, text in arrivals) == SLOW_ANSWER
    assert last.usage.total_tokens == fake_llm.streams[-1]["usage"]["total_tokens"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["rest ?stream=1", "v1"])
def test_a_client_that_hangs_up_stops_the_answer_and_settles_its_credits(
    daphne, account_a, key_a, handbook, fake_llm, how
):
    fake_llm.answer, fake_llm.backend.chunk_delay = LONG_ANSWER, CHUNK_DELAY
    with httpx2.Client(timeout=30) as http, http.stream("POST", **_stream_request(how, daphne, key_a)) as response:
        assert response.status_code == 200
        assert any(_token_text(how, event) for _, event in _events(response))  # stops at the first token
    # Leaving the block closed the connection mid-answer.

    deadline = time.monotonic() + 20
    while True:
        with account_context(account_a):
            open_holds = CreditHold.objects.for_account(account_a).filter(status=HoldStatus.OPEN).count()
            answer = Message.objects.for_account(account_a).filter(role="assistant").first()
        stream = fake_llm.streams[-1]
        if (not open_holds and answer is not None and stream["client_left"]) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert open_holds == 0, "the credit hold was left open"
    assert answer is not None and answer.status == "cancelled"
    assert stream["client_left"] and len(stream["sent_at"]) < stream["words"] // 2, "the model kept writing"
    with account_context(account_a):
        charge = CreditLedgerEntry.objects.for_account(account_a).get(reference=references.message(answer.pk))
    assert charge.tokens == answer.total_tokens > 0 and answer.content == LONG_ANSWER[: len(answer.content)]
