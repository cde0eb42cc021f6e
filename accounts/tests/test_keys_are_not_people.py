"""An API key is not the person who made it.

A key owns the conversations it starts and never reaches a person's (nor a person a
key's), on every surface: websocket, REST, SSE, /v1 and the dashboard. A key
authenticates the API, the websocket and /v1 only; dashboard pages act for the session's
account whatever Authorization header comes with them."""

import json

import pytest

from accounts import services
from accounts.tests.factories import make_api_key
from chat.models import Conversation
from chat.tests.conftest import handbook, ingest_text  # noqa: F401 (fixtures)
from chat.tests.test_websocket import Socket, _key_socket, _session_headers
from core.tenancy import account_context

pytestmark = pytest.mark.django_db(transaction=True)


def _owners_key(account, owner) -> str:
    """A key made on the Team page by the owner (so `created_by` is that person)."""
    with account_context(account):
        _, raw = services.api_key_create(account=account, actor=owner, name="made on the Team page")
    return raw


def _owners_conversation(client, account, owner) -> int:
    """The owner's private conversation, started on the dashboard's websocket."""
    socket = Socket(_session_headers(client, owner, "http://localhost:8000"))
    assert socket.connect()[0]
    frames = socket.ask("What is our holiday policy?")
    assert frames[-1]["type"] == "chat.done"
    socket.close()
    return frames[0]["conversation_id"]


def test_a_key_cannot_continue_its_creators_conversation_over_the_websocket(
    client, account_a, owner_a, handbook, fake_llm
):
    conversation_id = _owners_conversation(client, account_a, owner_a)
    socket = Socket([(b"authorization", f"Bearer {_owners_key(account_a, owner_a)}".encode())])
    assert socket.connect()[0]
    frames = socket.ask("Tell me more", conversation_id=conversation_id)
    assert frames[-1]["type"] == "chat.error" and frames[-1]["code"] == "not_found"
    socket.close()


def test_a_key_cannot_continue_its_creators_conversation_over_rest_sse_or_list_it(
    client, account_a, owner_a, handbook, fake_llm
):
    conversation_id = _owners_conversation(client, account_a, owner_a)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {_owners_key(account_a, owner_a)}"}
    assert client.get(f"/api/v1/conversations/{conversation_id}/", **auth).status_code == 404
    assert client.get("/api/v1/conversations/", **auth).json()["results"] == []
    answer = client.post(
        "/api/v1/chat/?stream=1",
        {"message": "more", "conversation_id": conversation_id},
        content_type="application/json",
        **auth,
    )
    assert answer.status_code == 404


def test_a_keys_websocket_conversation_belongs_to_the_key_not_its_creator(
    client, account_a, owner_a, handbook, fake_llm
):
    raw = _owners_key(account_a, owner_a)
    socket = Socket([(b"authorization", f"Bearer {raw}".encode())])
    assert socket.connect()[0]
    frames = socket.ask("What is our holiday policy?")
    socket.close()
    conversation_id = frames[0]["conversation_id"]
    with account_context(account_a):
        conversation = Conversation.objects.for_account(account_a).get(pk=conversation_id)
        assert conversation.user_id is None and conversation.api_key_id is not None
    # The key sees it on REST; the person who made the key does not, on REST or the dashboard.
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert client.get(f"/api/v1/conversations/{conversation_id}/", **auth).status_code == 200
    client.force_login(owner_a)
    assert client.get(f"/api/v1/conversations/{conversation_id}/").status_code == 404
    assert conversation_id not in [c["id"] for c in client.get("/api/v1/conversations/").json()["results"]]
    assert client.get(f"/chat/{conversation_id}/").status_code == 404


def test_a_person_never_sees_a_conversation_a_key_started_even_one_stored_with_their_name(
    client, account_a, owner_a, handbook, fake_llm
):
    """Rows written before the fix carried the key's creator as `user`: they stay the key's."""
    raw = _owners_key(account_a, owner_a)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    started = client.post(
        "/api/v1/chat/", {"message": "What is our holiday policy?"}, content_type="application/json", **auth
    ).json()["conversation_id"]
    with account_context(account_a):
        Conversation.objects.for_account(account_a).filter(pk=started).update(user=owner_a)
    client.force_login(owner_a)
    assert client.get(f"/api/v1/conversations/{started}/").status_code == 404
    assert client.get(f"/chat/{started}/").status_code == 404
    owners_socket = Socket(_session_headers(client, owner_a, "http://localhost:8000"))
    assert owners_socket.connect()[0]
    assert owners_socket.ask("more", conversation_id=started)[-1]["code"] == "not_found"
    owners_socket.close()
    assert client.get(f"/api/v1/conversations/{started}/", **auth).status_code == 200


def test_another_key_of_the_same_account_does_not_see_a_keys_conversation(account_a, handbook, fake_llm):
    first = _key_socket(account_a)
    started = first.ask("What is our holiday policy?")[0]["conversation_id"]
    first.close()
    second = _key_socket(account_a)
    assert second.ask("more", conversation_id=started)[-1]["code"] == "not_found"
    second.close()


def test_v1_chat_with_a_key_never_lands_in_a_persons_conversation(client, account_a, owner_a, handbook, fake_llm):
    raw = _owners_key(account_a, owner_a)
    response = client.post(
        "/v1/chat/completions",
        json.dumps({"model": "groundwork", "messages": [{"role": "user", "content": "What is our holiday policy?"}]}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert response.status_code == 200
    with account_context(account_a):
        assert not Conversation.objects.for_account(account_a).filter(user=owner_a).exists()


def test_dashboard_pages_use_the_session_account_and_ignore_a_bearer_key(
    client, account_a, account_b, owner_a, handbook, ingest_text, fake_llm
):
    ingest_text(account_b, "beta-secrets.md", "Beta's private plans for the plant room.")
    other_accounts_key = make_api_key(account_b)
    client.force_login(owner_a)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {other_accounts_key}"}
    page = client.get("/documents/", **auth)
    assert page.status_code == 200
    body = page.content.decode()
    assert "handbook.md" in body and "beta-secrets.md" not in body
    team = client.get("/team/", **auth)
    assert team.status_code == 200 and "owner@acme.test" in team.content.decode()
    assert "owner@beta.test" not in team.content.decode()
    assert client.get("/chat/", **auth).status_code == 200
    assert client.get("/credits/", **auth).status_code == 200


def test_a_bearer_key_alone_does_not_open_dashboard_pages(client, account_a, handbook, fake_llm):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {make_api_key(account_a)}"}
    for path in ("/documents/", "/team/", "/chat/", "/credits/"):
        response = client.get(path, **auth)
        assert response.status_code == 302 and "/login/" in response["Location"], path
    # The API itself still takes the key.
    assert client.get("/api/v1/documents/", **auth).status_code == 200
