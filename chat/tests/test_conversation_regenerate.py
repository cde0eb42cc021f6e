"""Regenerate: the websocket's `chat.regenerate` and `POST
conversations/{id}/regenerate/` ask the conversation's last question again through the one
driver, over the real consumer and the fake OpenAI-style server on loopback: a new turn,
held and charged like any; the old answer stays as a previous version and leaves the history;
a failure releases the hold and keeps the old answer current. Deleting a conversation tells
the principal's open sockets."""

import pytest

from accounts.models import ApiKey
from accounts.tests.factories import add_member, make_api_key
from billing.models import CreditHold, CreditLedgerEntry
from billing.selectors import balance_get
from chat.models import Conversation, Message
from chat.tests.test_websocket import Socket
from core.tenancy import account_context

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How many holiday days do we get?"


def _key_socket(key):
    socket = Socket([(b"authorization", f"Bearer {key}".encode())])
    connected, _ = socket.connect()
    assert connected
    return socket


def _messages(account, conversation_id):
    with account_context(account):
        return list(
            Message.objects.for_account(account).filter(conversation_id=conversation_id).order_by("created_at", "pk")
        )


def _open_holds(account) -> bool:
    with account_context(account):
        return CreditHold.objects.for_account(account).filter(status="open").exists()


def test_regenerate_over_the_socket_is_a_charged_turn_that_keeps_the_old_answer(account_a, handbook, fake_llm):
    key = make_api_key(account_a)
    socket = _key_socket(key)
    fake_llm.answer = "Twenty days [Document 1]."
    first = socket.ask(QUESTION)
    conversation_id, old_id = first[0]["conversation_id"], first[-1]["message_id"]
    with account_context(account_a):
        before = balance_get(account=account_a)
    fake_llm.answer = "Everyone has twenty-eight days of holiday [Document 1]."
    socket.send({"type": "chat.regenerate", "conversation_id": conversation_id})
    frames = socket.until_final()
    assert [f["type"] for f in frames][0] == "chat.sources" and frames[-1]["type"] == "chat.done"
    assert frames[0]["conversation_id"] == conversation_id
    done = frames[-1]
    assert "".join(f["text"] for f in frames if f["type"] == "chat.token") == done["answer"]
    assert done["answer"].startswith("Everyone has twenty-eight days") and done["citations"][0]["n"] == 1
    # The model was asked the same question again, without the answer being replaced.
    sent = fake_llm.requests_to("/v1/chat/completions")[-1]["messages"]
    assert QUESTION in sent[-1]["content"] and not any("Twenty days" in m["content"] for m in sent)
    question, old, new = _messages(account_a, conversation_id)
    assert question.role == "user" and question.content == QUESTION  # asked again, not stored again
    assert old.pk == old_id and old.replaced_by_id == new.pk and old.content == "Twenty days [Document 1]."
    assert new.pk == done["message_id"] and new.replaced_by_id is None
    with account_context(account_a):
        charge = CreditLedgerEntry.objects.for_account(account_a).get(reference=f"message:{new.pk}")
        assert -charge.delta == done["usage"]["total_tokens"] == new.credits_charged > 0
        assert balance_get(account=account_a) == done["credits_remaining"] < before
    assert not _open_holds(account_a)
    # A follow-up reads the current answer only.
    fake_llm.answer = "Unused days carry over until March [Document 1]."
    assert socket.ask("And unused ones?", conversation_id=conversation_id)[-1]["type"] == "chat.done"
    history = " ".join(m["content"] for m in fake_llm.requests_to("/v1/chat/completions")[-1]["messages"])
    assert "Twenty days" not in history
    socket.close()


def test_a_failed_regenerate_releases_its_hold_and_keeps_the_answer(account_a, handbook, fake_llm, settings):
    settings.CHAT_MODEL, settings.CHAT_FALLBACK_MODEL = "primary-model", "fallback-model"
    socket = _key_socket(make_api_key(account_a))
    first = socket.ask(QUESTION)
    conversation_id = first[0]["conversation_id"]
    fake_llm.fail("primary-model", 500)
    fake_llm.fail("fallback-model", 500)
    with account_context(account_a):
        before = balance_get(account=account_a)
        searches = CreditLedgerEntry.objects.for_account(account_a).filter(kind="embedding").count()
    socket.send({"type": "chat.regenerate", "conversation_id": conversation_id})
    frames = socket.until_final()
    assert frames[-1]["type"] == "chat.error" and frames[-1]["code"] == "provider_unavailable"
    assert not _open_holds(account_a)
    with account_context(account_a):
        # Only the question's embedding was paid for; no answer was.
        query_cost = sum(
            -e.delta
            for e in CreditLedgerEntry.objects.for_account(account_a).filter(kind="embedding").order_by("pk")[searches:]
        )
        assert balance_get(account=account_a) == before - query_cost
    question, answer = _messages(account_a, conversation_id)
    assert answer.pk == first[-1]["message_id"] and answer.replaced_by_id is None
    socket.close()


def test_regenerate_refusals_over_the_socket(account_a, account_b, owner_a, handbook, fake_llm):
    key = make_api_key(account_a)
    socket = _key_socket(key)
    with account_context(account_a):
        api_key = ApiKey.objects.for_account(account_a).get()
        empty = Conversation.objects.for_account(account_a).create(account=account_a, api_key=api_key, title="Empty")
        owners = Conversation.objects.for_account(account_a).create(account=account_a, user=owner_a, title="Owner's")
        Message.objects.for_account(account_a).create(
            account=account_a, conversation=owners, role="user", content=QUESTION
        )
    fake_llm.clear()
    socket.send({"type": "chat.regenerate"})
    assert socket.until_final()[-1]["code"] == "bad_request"
    for conversation_id in (owners.pk, 10**9, "nope"):
        socket.send({"type": "chat.regenerate", "conversation_id": conversation_id})
        assert socket.until_final()[-1]["code"] in ("not_found", "bad_request")
    socket.send({"type": "chat.regenerate", "conversation_id": empty.pk})
    error = socket.until_final()[-1]
    assert error["code"] == "nothing_to_regenerate" and "no question" in error["message"]
    assert fake_llm.requests_to("/v1/chat/completions") == [] and not _open_holds(account_a)
    # Another account's key cannot reach it either.
    other = _key_socket(make_api_key(account_b))
    other.send({"type": "chat.regenerate", "conversation_id": owners.pk})
    assert other.until_final()[-1]["code"] == "not_found"
    socket.close()
    other.close()


def test_rest_regenerate_answers_like_post_chat(client, account_a, owner_a, handbook, fake_llm):
    client.force_login(owner_a)
    fake_llm.answer = "Twenty days [Document 1]."
    first = client.post("/api/v1/chat/", {"message": QUESTION}, content_type="application/json").json()
    fake_llm.answer = "Twenty-eight days [Document 1]."
    url = f"/api/v1/conversations/{first['conversation_id']}/regenerate/"
    response = client.post(url, {}, content_type="application/json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"conversation_id", "message_id", "answer", "citations", "usage", "credits_remaining"}
    assert body["answer"] == "Twenty-eight days [Document 1]." and body["conversation_id"] == first["conversation_id"]
    detail = client.get(f"/api/v1/conversations/{first['conversation_id']}/").json()
    assert [(m["role"], m["replaced_by"]) for m in detail["messages"]] == [
        ("user", None),
        ("assistant", body["message_id"]),
        ("assistant", None),
    ]
    assert detail["messages"][-1]["id"] == body["message_id"]
    # Streamed, as server-sent events, like POST chat/?stream=1.
    import json

    streamed = client.post(url + "?stream=1", {}, content_type="application/json")
    assert streamed["Content-Type"] == "text/event-stream"
    events = [json.loads(chunk[6:]) for chunk in b"".join(streamed.streaming_content).decode().split("\n\n") if chunk]
    assert events[0]["type"] == "chat.sources" and events[-1]["type"] == "chat.done"
    # A teammate gets the one not-found, and nothing is asked.
    fake_llm.clear()
    client.force_login(add_member(account_a))
    assert client.post(url, {}, content_type="application/json").status_code == 404
    assert fake_llm.requests_to("/v1/chat/completions") == []


def test_deleting_a_conversation_tells_the_principals_open_sockets(client, account_a, handbook, fake_llm):
    key = make_api_key(account_a)
    socket = _key_socket(key)
    conversation_id = socket.ask(QUESTION)[0]["conversation_id"]
    response = client.delete(f"/api/v1/conversations/{conversation_id}/", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 204
    assert socket.receive() == {"type": "conversation.deleted", "conversation_id": conversation_id}
    # The socket stays open; asking in the deleted conversation is the one not-found.
    assert socket.ask("And laptops?", conversation_id=conversation_id)[-1]["code"] == "not_found"
    assert socket.ask("And laptops?")[-1]["type"] == "chat.done"
    assert not _open_holds(account_a)
    socket.close()


def test_a_turn_whose_conversation_is_deleted_meanwhile_stores_nothing_and_settles(
    account_a, owner_a, handbook, fake_llm
):
    from chat.driver import TurnRun
    from chat.services import conversation_delete

    first = TurnRun(account=account_a, user=owner_a, question=QUESTION).run()
    run = TurnRun(account=account_a, user=owner_a, question="And laptops?", conversation_id=first["conversation_id"])
    frames = run.frames()
    assert next(frames)["type"] == "chat.sources"  # prepared: the hold is taken
    with account_context(account_a, user=owner_a):
        conversation_delete(account=account_a, conversation_id=first["conversation_id"], user=owner_a)
    rest = list(frames)
    assert rest[-1]["type"] == "chat.error" and rest[-1]["code"] == "not_found"
    assert _messages(account_a, first["conversation_id"]) == [] and not _open_holds(account_a)
    with account_context(account_a):
        charge = CreditLedgerEntry.objects.for_account(account_a).get(
            reference=f"conversation:{first['conversation_id']}", kind="chat"
        )
    assert charge.delta < 0  # what the model wrote is paid for, though there is nowhere to keep it


def test_a_regenerate_stopped_before_any_text_replaces_nothing(account_a, handbook, fake_llm):
    socket = _key_socket(make_api_key(account_a))
    first = socket.ask(QUESTION)
    conversation_id = first[0]["conversation_id"]
    socket.send({"type": "chat.regenerate", "conversation_id": conversation_id})
    socket.send({"type": "chat.cancel"})  # arrives while the turn is being prepared
    done = socket.until_final()[-1]
    assert done["type"] == "chat.done" and done["status"] == "cancelled" and done["answer"] == ""
    question, answer, stopped = _messages(account_a, conversation_id)
    assert answer.pk == first[-1]["message_id"] and answer.replaced_by_id is None and stopped.content == ""
    assert not _open_holds(account_a)
    socket.close()
