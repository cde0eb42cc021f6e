"""A chat question while the model server is busy or unreachable: it is stored before any
model is asked and never leaves its conversation; while the server is slow the turn says it is
waiting, and at which step; when it fails the error says where the question is, and asking it
again (regenerate) answers it without a second copy. Over the real consumer and REST, against
the fake OpenAI server on loopback (a delay per request, outages of N requests)."""

import pytest

from accounts.tests.factories import make_api_key
from billing.models import CreditHold
from chat.models import Message
from chat.tests.test_websocket import Socket
from core.tenancy import account_context

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How many holiday days do we get?"


def _socket(account):
    socket = Socket([(b"authorization", f"Bearer {make_api_key(account)}".encode())])
    connected, _ = socket.connect()
    assert connected
    return socket


def _thread(account, conversation_id):
    with account_context(account):
        return list(
            Message.objects.for_account(account)
            .filter(conversation_id=conversation_id)
            .order_by("created_at", "pk")
            .values_list("role", "content", "status")
        )


def _open_holds(account) -> bool:
    with account_context(account):
        return CreditHold.objects.for_account(account).filter(status="open").exists()


def test_a_question_the_server_cannot_read_stays_and_is_answered_by_a_retry(account_a, handbook, fake_llm):
    fake_llm.outage(20, 503, path="embeddings")  # its embedding: the turn's first model call
    socket = _socket(account_a)
    frames = socket.ask(QUESTION)
    error = frames[-1]
    assert error["type"] == "chat.error" and error["code"] == "provider_unavailable"
    assert error["conversation_id"] and error["question_id"]
    assert _thread(account_a, error["conversation_id"]) == [("user", QUESTION, "complete")]
    assert not _open_holds(account_a)
    # Retry: the stored question asked again, no second copy of it.
    fake_llm.recover()
    socket.send({"type": "chat.regenerate", "conversation_id": error["conversation_id"]})
    done = socket.until_final()[-1]
    assert done["type"] == "chat.done", done
    thread = _thread(account_a, error["conversation_id"])
    assert [(role, text) for role, text, _ in thread][:1] == [("user", QUESTION)]
    assert [role for role, _, _ in thread] == ["user", "assistant"] and thread[1][2] == "complete"
    socket.close()


def test_a_question_whose_answer_fails_stays_in_its_conversation(account_a, handbook, fake_llm, settings):
    settings.CHAT_MODEL, settings.CHAT_FALLBACK_MODEL = "primary-model", "fallback-model"
    fake_llm.fail("primary-model", 503)
    fake_llm.fail("fallback-model", 503)
    socket = _socket(account_a)
    frames = socket.ask(QUESTION)
    sources, error = frames[0], frames[-1]
    assert sources["type"] == "chat.sources" and error["type"] == "chat.error"
    assert error["conversation_id"] == sources["conversation_id"] and error["question_id"]
    assert _thread(account_a, error["conversation_id"])[0][:2] == ("user", QUESTION)
    fake_llm.recover()
    socket.send({"type": "chat.regenerate", "conversation_id": error["conversation_id"]})
    assert socket.until_final()[-1]["type"] == "chat.done"
    assert [role for role, _, _ in _thread(account_a, error["conversation_id"])].count("user") == 1
    socket.close()


def test_a_turn_waiting_for_a_busy_server_says_so_and_where(account_a, handbook, fake_llm, settings):
    settings.CHAT_WAIT_NOTICE_SECONDS = 0.3
    fake_llm.delay = 1.0  # every request waits in the busy server's queue
    socket = _socket(account_a)
    frames = socket.ask(QUESTION)
    kinds = [f["type"] for f in frames]
    assert kinds[-1] == "chat.done", frames[-1]
    first_sources, first_token = kinds.index("chat.sources"), kinds.index("chat.token")
    before_sources = [f for f in frames[:first_sources] if f["type"] == "chat.status"]
    before_token = [f for f in frames[first_sources:first_token] if f["type"] == "chat.status"]
    assert before_sources and all(f["step"] == "search" and f["state"] == "waiting" for f in before_sources)
    assert before_token and all(f["step"] == "answer" for f in before_token)
    assert "model server" in before_sources[0]["message"] and "kept" in before_sources[0]["message"]
    # None once the answer streams.
    assert "chat.status" not in kinds[first_token:]
    socket.close()


def test_rest_chat_keeps_the_question_and_regenerate_answers_it(client, owner_a, account_a, handbook, fake_llm):
    client.force_login(owner_a)
    fake_llm.outage(20, 503, path="embeddings")
    response = client.post("/api/v1/chat/", {"message": QUESTION}, content_type="application/json")
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "provider_unavailable" and error["conversation_id"] and error["question_id"]
    detail = client.get(f"/api/v1/conversations/{error['conversation_id']}/").json()
    assert [(m["role"], m["content"]) for m in detail["messages"]] == [("user", QUESTION)]
    fake_llm.recover()
    retried = client.post(
        f"/api/v1/conversations/{error['conversation_id']}/regenerate/", {}, content_type="application/json"
    )
    assert retried.status_code == 200, retried.content
    detail = client.get(f"/api/v1/conversations/{error['conversation_id']}/").json()
    assert [m["role"] for m in detail["messages"]] == ["user", "assistant"]


def test_a_refused_turn_stores_no_question(account_a, handbook, fake_llm, settings):
    # Not enough credits: the person adds credits or shortens it; nothing is left behind.
    from billing.selectors import balance_get
    from billing.services import credits_debit

    with account_context(account_a):
        credits_debit(account=account_a, tokens=balance_get(account=account_a) - 10, key="drain", kind="chat")
    socket = _socket(account_a)
    error = socket.ask(QUESTION)[-1]
    assert error["code"] == "insufficient_credits" and "question_id" not in error
    with account_context(account_a):
        assert not Message.objects.for_account(account_a).filter(content=QUESTION).exists()
    socket.close()


def test_another_account_learns_nothing_of_a_stored_question(account_a, account_b, handbook, fake_llm):
    fake_llm.outage(20, 503, path="embeddings")
    socket_a = _socket(account_a)
    error_a = socket_a.ask(QUESTION)[-1]
    fake_llm.recover()
    socket_b = _socket(account_b)
    # Account B names A's conversation: the one not-found, nothing about A's question.
    frames = socket_b.ask(QUESTION, conversation_id=error_a["conversation_id"])
    assert frames[-1]["code"] == "not_found" and "question_id" not in frames[-1]
    socket_b.send({"type": "chat.regenerate", "conversation_id": error_a["conversation_id"]})
    refused = socket_b.until_final()[-1]
    assert refused["code"] == "not_found" and "question_id" not in refused
    assert _thread(account_a, error_a["conversation_id"]) == [("user", QUESTION, "complete")]
    socket_a.close()
    socket_b.close()


def test_the_openai_endpoint_says_the_model_is_unavailable_and_a_resend_answers(
    live_server, account_a, handbook, fake_llm
):
    # An OpenAI SDK client holds its conversation itself: it retries by sending it again.
    import openai

    sdk = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=make_api_key(account_a), max_retries=0)
    question = [{"role": "user", "content": QUESTION}]
    fake_llm.outage(20, 503, path="embeddings")
    with pytest.raises(openai.APIStatusError) as failed:
        sdk.chat.completions.create(model="groundwork", messages=question)
    assert failed.value.status_code == 502
    body = failed.value.body if isinstance(failed.value.body, dict) else {}
    error = body.get("error", body)
    assert error["code"] == "provider_unavailable" and error["conversation_id"] and error["question_id"]
    assert _thread(account_a, error["conversation_id"]) == [("user", QUESTION, "complete")]
    fake_llm.recover()
    assert sdk.chat.completions.create(model="groundwork", messages=question).choices[0].message.content
