"""Every surface that reads a team's data, for a password session of a member of a team whose
owner turned on "Members must sign in with SSO" (accounts/sso/session.py, `sso_shuts_out`):
the team switcher, the REST API and /v1 through the session (conversations, feedback, audit,
search with explain) and MCP. The session has a team of its own too (`POST /accounts/new/`
stays open), so each surface is tried both ways: with the SSO team as the session's team (refused,
403 `sso_required`) and with the other team asking for the SSO team's ids (404 or empty, as
another account's). API keys belong to the team: unaffected. The websocket's side is
chat/tests/test_sso_socket.py, the export's exports/tests/test_export_sso.py."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import Account, User
from accounts.tests.factories import make_api_key
from accounts.tests.oidc_provider import sso_provider as provider  # noqa: F401 (a fixture)
from accounts.tests.oidc_provider import sso_sign_in
from audit.services import audit_record
from chat.models import MessageFeedback
from chat.tests.test_feedback import _turns
from core.tenancy import account_context

pytestmark = pytest.mark.django_db

MARKER = "Zephyrine"
HANDBOOK = f"# Board\n\nThe board of Acme plans to buy {MARKER} Robotics for forty-two million euros."


@pytest.fixture
def acme(account_a, owner_a, fake_llm, upload_and_ingest):
    """Acme (requires SSO): an ingested document, the owner's conversation with an answer and
    their feedback on it, an audit entry."""
    document = upload_and_ingest(account_a, "board.md", HANDBOOK.encode())
    answer = _turns(account_a, user=owner_a, turns=((f"What about {MARKER}?", f"{MARKER} [Document 1]."),))[0]
    conversation = answer.conversation
    with account_context(account_a):
        MessageFeedback.objects.for_account(account_a).create(
            account=account_a, message=answer, user=owner_a, rating="up", comment=f"{MARKER} feedback"
        )
        audit_record(account=account_a, action="collection.create", actor=owner_a, target=f"{MARKER} collection")
    Account.objects.filter(pk=account_a.pk).update(sso_required=True)
    return {"document": document, "conversation": conversation, "answer": answer}


def _on_acme(owner) -> Client:
    """A password session whose team is Acme."""
    client = Client()
    client.force_login(owner)
    return client


def _on_a_team_of_its_own(owner) -> Client:
    """A password session that made a team of its own and works in it."""
    client = _on_acme(owner)
    assert client.post("/accounts/new/", {"name": "Side team"}).status_code == 302
    assert client.get("/").status_code == 200
    return client


def _sso_refusal(response):
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "sso_required"
    assert "Acme requires single sign-on" in response.json()["error"]["message"]


def _json(client, method, path, body=None):
    return getattr(client, method)(path, body, content_type="application/json")


# --- the team switcher -------------------------------------------------------------------------


def test_the_switcher_marks_the_team_and_a_password_session_cannot_switch_to_it(provider, acme, account_a, owner_a):
    client = _on_a_team_of_its_own(owner_a)
    side = client.session["account_id"]
    page = client.get("/").content.decode()
    assert "Acme (sign in with SSO to open)" in page and "Side team" in page

    switched = client.post("/accounts/switch/", {"account_id": account_a.pk})
    assert switched.status_code == 302 and switched["Location"].startswith("/sso/login/")
    assert client.session["account_id"] == side  # not switched
    assert User.objects.get(pk=owner_a.pk).last_account_id == side
    home = client.get("/")
    assert home.status_code == 200 and MARKER not in home.content.decode()

    # Signing in with SSO from there opens Acme.
    sso_sign_in(client, provider, owner_a, start=switched["Location"])
    assert client.session["account_id"] == account_a.pk
    assert client.get("/documents/").status_code == 200
    assert "sign in with SSO to open" not in client.get("/").content.decode()


def test_without_sso_set_up_the_switcher_says_so_and_stays(acme, account_a, owner_a, settings):
    settings.OIDC_ISSUER = ""
    client = _on_a_team_of_its_own(owner_a)
    side = client.session["account_id"]
    switched = client.post("/accounts/switch/", {"account_id": account_a.pk}, follow=True)
    assert client.session["account_id"] == side
    assert "Acme requires single sign-on" in switched.content.decode()


# --- the REST API and /v1 through the session ----------------------------------------------------


def test_conversations(acme, owner_a):
    conversation = acme["conversation"]
    _sso_refusal(_on_acme(owner_a).get("/api/v1/conversations/"))
    _sso_refusal(_on_acme(owner_a).get(f"/api/v1/conversations/{conversation.pk}/"))
    side = _on_a_team_of_its_own(owner_a)
    assert side.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 404
    assert _json(side, "patch", f"/api/v1/conversations/{conversation.pk}/", {"title": "x"}).status_code == 404
    listed = side.get("/api/v1/conversations/", {"q": MARKER})
    assert listed.status_code == 200 and listed.json()["results"] == []
    assert (
        _json(side, "post", "/api/v1/chat/", {"message": "Hello?", "conversation_id": conversation.pk}).status_code
        == 404
    )


def test_feedback(acme, owner_a):
    answer = acme["answer"]
    _sso_refusal(_on_acme(owner_a).get("/api/v1/feedback/"))
    _sso_refusal(_json(_on_acme(owner_a), "post", f"/api/v1/messages/{answer.pk}/feedback/", {"rating": "down"}))
    side = _on_a_team_of_its_own(owner_a)
    assert _json(side, "post", f"/api/v1/messages/{answer.pk}/feedback/", {"rating": "down"}).status_code == 404
    listed = side.get("/api/v1/feedback/")
    assert listed.status_code == 200 and MARKER not in listed.content.decode()


def test_audit(acme, owner_a):
    _sso_refusal(_on_acme(owner_a).get("/api/v1/audit/"))
    listed = _on_a_team_of_its_own(owner_a).get("/api/v1/audit/")
    assert listed.status_code == 200 and MARKER not in listed.content.decode()


def test_search_explain(acme, owner_a, account_a):
    body = {"query": f"{MARKER} Robotics", "explain": True}
    _sso_refusal(_json(_on_acme(owner_a), "post", "/api/v1/search/", body))
    found = _json(_on_a_team_of_its_own(owner_a), "post", "/api/v1/search/", body)
    assert found.status_code in (200, 402), found.content  # the side team may have no credits to embed
    assert MARKER not in found.content.decode()
    # The team's API key is the team's, not a session: unaffected.
    by_key = Client().post(
        "/api/v1/search/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {make_api_key(account_a)}"
    )
    assert by_key.status_code == 200 and by_key.json()["results"][0]["document_id"] == acme["document"].pk


def test_documents_and_v1(acme, owner_a):
    document = acme["document"]
    _sso_refusal(_on_acme(owner_a).get(f"/api/v1/documents/{document.pk}/"))
    _sso_refusal(
        _json(
            _on_acme(owner_a),
            "post",
            "/v1/chat/completions",
            {"model": "groundwork", "messages": [{"role": "user", "content": "Hello?"}]},
        )
    )
    side = _on_a_team_of_its_own(owner_a)
    assert side.get(f"/api/v1/documents/{document.pk}/").status_code == 404
    assert side.get(f"/documents/{document.pk}/").status_code == 404


# --- MCP ---------------------------------------------------------------------------------------


def test_mcp_takes_no_session(acme, owner_a):
    """MCP is API keys only: a session's cookie, on its SSO team or its own, is no way in."""
    from asgiref.sync import async_to_sync
    from django.conf import settings as django_settings

    from integrations.mcp_http import mcp_endpoint

    for client in (_on_acme(owner_a), _on_a_team_of_its_own(owner_a)):
        cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
        sent = []

        async def receive():
            return {
                "type": "http.request",
                "body": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
                "more_body": False,
            }

        async def send(message, sent=sent):
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/mcp",
            "headers": [(b"host", b"testserver"), (b"cookie", cookie.encode()), (b"content-type", b"application/json")],
        }
        async_to_sync(mcp_endpoint)(scope, receive, send)
        assert sent[0]["status"] == 401
        assert MARKER not in b"".join(m.get("body", b"") for m in sent[1:]).decode()
