"""REST chat (JSON and server-sent events) and conversation history. The OpenAI-compatible
endpoint is tested in test_openai_compat.py, HTTP streaming under daphne in
test_http_streaming.py."""

import json

import pytest

from accounts.tests.factories import make_api_key
from core.tenancy import account_context


def _auth(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


@pytest.fixture
def key_a(account_a):
    return make_api_key(account_a)


def test_rest_chat_answers_with_citations_and_usage(client, account_a, key_a, handbook, fake_llm):
    fake_llm.answer = "Twenty-eight days [Document 1]."
    response = client.post(
        "/api/v1/chat/", {"message": "How much holiday do we get?"}, content_type="application/json", **_auth(key_a)
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"conversation_id", "message_id", "answer", "citations", "usage", "credits_remaining"}
    assert body["answer"] == "Twenty-eight days [Document 1]."
    assert body["citations"][0] == {
        "n": 1,
        "document_id": handbook.pk,
        "document_name": "handbook.md",
        "chunk_index": body["citations"][0]["chunk_index"],
        "pages": None,
    }
    follow = client.post(
        "/api/v1/chat/",
        {"message": "And laptops?", "conversation_id": body["conversation_id"]},
        content_type="application/json",
        **_auth(key_a),
    ).json()
    assert follow["conversation_id"] == body["conversation_id"]


@pytest.mark.django_db(transaction=True)  # the turn streams from a worker thread with its own connection
def test_rest_chat_streams_server_sent_events(client, account_a, key_a, handbook, fake_llm):
    response = client.post(
        "/api/v1/chat/?stream=1",
        {"message": "What is our holiday policy?"},
        content_type="application/json",
        **_auth(key_a),
    )
    assert response["Content-Type"] == "text/event-stream"
    events = [json.loads(line[6:]) for line in b"".join(response.streaming_content).decode().split("\n\n") if line]
    assert events[0]["type"] == "chat.sources" and events[-1]["type"] == "chat.done"
    assert {e["type"] for e in events[1:-1]} == {"chat.token"}


@pytest.mark.parametrize(
    "body, code",
    [({}, "invalid"), ({"message": ""}, "invalid"), ({"message": "x", "conversation_id": "abc"}, "invalid")],
)
def test_rest_chat_bad_requests(client, key_a, body, code):
    response = client.post("/api/v1/chat/", body, content_type="application/json", **_auth(key_a))
    assert response.status_code == 400 and response.json()["error"]["code"] == code


def test_rest_chat_insufficient_credits_is_402(client, account_a, key_a, handbook, fake_llm):
    from billing.selectors import balance_get
    from billing.services import credits_debit

    with account_context(account_a):
        credits_debit(account=account_a, tokens=balance_get(account=account_a) - 5, key="drain", kind="chat")
    response = client.post(
        "/api/v1/chat/", {"message": "What is our policy?"}, content_type="application/json", **_auth(key_a)
    )
    assert response.status_code == 402 and response.json()["error"]["code"] == "insufficient_credits"


def test_conversations_history_and_isolation(client, account_a, account_b, key_a, handbook, fake_llm):
    body = client.post(
        "/api/v1/chat/", {"message": "What is our holiday policy?"}, content_type="application/json", **_auth(key_a)
    ).json()
    listing = client.get("/api/v1/conversations/", **_auth(key_a)).json()
    assert listing["results"][0]["id"] == body["conversation_id"] and listing["results"][0]["message_count"] == 2
    detail = client.get(f"/api/v1/conversations/{body['conversation_id']}/", **_auth(key_a)).json()
    assert [m["role"] for m in detail["messages"]] == ["user", "assistant"]
    assert detail["messages"][1]["citations"] == body["citations"]
    key_b = make_api_key(account_b)
    assert client.get("/api/v1/conversations/", **_auth(key_b)).json()["results"] == []
    assert client.get(f"/api/v1/conversations/{body['conversation_id']}/", **_auth(key_b)).status_code == 404
    response = client.post(
        "/api/v1/chat/",
        {"message": "more", "conversation_id": body["conversation_id"]},
        content_type="application/json",
        **_auth(key_b),
    )
    assert response.status_code == 404


def test_conversations_are_private_to_who_started_them(client, account_a, owner_a, key_a, handbook, fake_llm):
    from accounts.tests.factories import add_member

    mine = client.post(
        "/api/v1/chat/", {"message": "What is our holiday policy?"}, content_type="application/json", **_auth(key_a)
    ).json()["conversation_id"]
    teammate = add_member(account_a)
    client.force_login(teammate)
    assert client.get("/api/v1/conversations/").json()["results"] == []
    assert client.get(f"/api/v1/conversations/{mine}/").status_code == 404
    assert (
        client.post(
            "/api/v1/chat/", {"message": "go on", "conversation_id": mine}, content_type="application/json"
        ).status_code
        == 404
    )
    assert client.get(f"/chat/{mine}/").status_code == 404
    other_key = make_api_key(account_a, name="another integration")
    assert client.get("/api/v1/conversations/", **_auth(other_key)).json()["results"] == []


@pytest.mark.django_db(transaction=True)
def test_a_rest_answer_does_not_hold_the_credit_row_while_the_model_writes(live_server, account_a, handbook, fake_llm):
    """While a REST answer is being generated, the account's balance row is free (it would
    stay locked if the whole request were one transaction), so other chats are not blocked."""
    import threading
    import time
    import urllib.request

    from billing.models import AccountBalance

    fake_llm.backend.chunk_delay = 0.2
    request = urllib.request.Request(
        f"{live_server.url}/api/v1/chat/",
        method="POST",
        data=json.dumps({"message": "What is our holiday policy?"}).encode(),
        headers={"Authorization": f"Bearer {make_api_key(account_a)}", "Content-Type": "application/json"},
    )
    answered = []
    slow = threading.Thread(target=lambda: answered.append(urllib.request.urlopen(request, timeout=60).status))
    slow.start()
    deadline = time.monotonic() + 20
    while not fake_llm.requests_to("/v1/chat/completions") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake_llm.requests_to("/v1/chat/completions"), "the answer never started"
    with account_context(account_a):
        AccountBalance.objects.for_account(account_a).select_for_update(nowait=True).get()  # raises if locked
    slow.join()
    assert answered == [200]
