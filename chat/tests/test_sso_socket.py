"""/ws/chat/ and the owner's switch "Members must sign in with SSO" (accounts/sso/): a
password session is refused (4401, as no access); a session signed in through the provider
(a real one on loopback, accounts/tests/oidc_provider.py) chats; an API key is unaffected."""

import pytest
from django.conf import settings as django_settings
from django.test import Client

from accounts.models import Account
from accounts.sso.services import account_sso_required_set
from accounts.tests.factories import make_api_key
from accounts.tests.oidc_provider import sso_provider as provider  # noqa: F401 (a fixture)
from accounts.tests.oidc_provider import sso_sign_in
from chat.tests.test_socket_security import _close_code
from chat.tests.test_websocket import Socket
from core.tenancy import account_context

pytestmark = pytest.mark.django_db(transaction=True)


def _sso_client(provider, user) -> Client:
    return sso_sign_in(Client(), provider, user)


def _headers(client):
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    return [(b"cookie", cookie.encode()), (b"origin", b"http://localhost:8000")]


def test_a_password_session_is_refused_where_sso_is_required(provider, account_a, owner_a, handbook, fake_llm):
    Account.objects.filter(pk=account_a.pk).update(sso_required=True)
    password = Client()
    password.force_login(owner_a)
    refused = Socket(_headers(password))
    assert refused.connect()[0]
    assert refused.closed_with() == {"type": "websocket.close", "code": 4401}

    allowed = Socket(_headers(_sso_client(provider, owner_a)))
    assert allowed.connect()[0]
    assert allowed.ask("What is our holiday policy?")[-1]["type"] == "chat.done"

    key = Socket([(b"authorization", f"Bearer {make_api_key(account_a)}".encode())])
    assert key.connect()[0]
    assert key.ask("What is our holiday policy?")[-1]["type"] == "chat.done"


def test_turning_it_on_closes_the_open_password_sockets_only(provider, account_a, owner_a, handbook, fake_llm):
    password = Client()
    password.force_login(owner_a)
    by_password = Socket(_headers(password))
    by_sso = Socket(_headers(_sso_client(provider, owner_a)))
    by_key = Socket([(b"authorization", f"Bearer {make_api_key(account_a)}".encode())])
    for socket in (by_password, by_sso, by_key):
        assert socket.connect()[0]
    assert by_password.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
    with account_context(account_a):
        account_sso_required_set(account=account_a, actor=owner_a, required=True, actor_signed_in_with_sso=True)
    assert _close_code(by_password, within=1.0) == 4401
    assert _close_code(by_sso, within=0.3) is None and _close_code(by_key, within=0.3) is None
    assert by_sso.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
    assert by_key.ask("What is our holiday policy?")[-1]["type"] == "chat.done"


def test_a_password_session_on_another_team_cannot_reach_the_sso_teams_conversation(
    account_a, owner_a, handbook, fake_llm
):
    """The socket acts for the session's current team; a conversation of the team that requires
    SSO is another account's there: not found, and nothing of it is read."""
    from chat.models import Conversation, Message

    with account_context(account_a):
        conversation = Conversation.objects.for_account(account_a).create(
            account=account_a, user=owner_a, title="Acme's holidays"
        )
        Message.objects.for_account(account_a).create(
            account=account_a, conversation=conversation, role="user", content="What is our holiday policy?"
        )
        Message.objects.for_account(account_a).create(
            account=account_a, conversation=conversation, role="assistant", content="Twenty-eight days [Document 1]."
        )
    Account.objects.filter(pk=account_a.pk).update(sso_required=True)
    password = Client()
    password.force_login(owner_a)
    assert password.post("/accounts/new/", {"name": "Side team"}).status_code == 302
    socket = Socket(_headers(password))
    assert socket.connect()[0]
    for frame in (
        {"type": "chat.message", "message": "And in March?", "conversation_id": conversation.pk},
        {"type": "chat.regenerate", "conversation_id": conversation.pk},
    ):
        socket.send(frame)
        frames = socket.until_final()
        assert frames[-1]["type"] == "chat.error" and frames[-1]["code"] == "not_found", frames
        assert "holiday" not in str(frames).lower()
    with account_context(account_a):
        assert Message.objects.for_account(account_a).filter(conversation=conversation).count() == 2
    # Its current team switched to the SSO team (the switcher refuses; an old session could
    # still name it): the socket is refused at the handshake.
    session = password.session
    session["account_id"] = account_a.pk
    session.save()
    refused = Socket(_headers(password))
    assert refused.connect()[0]
    assert refused.closed_with() == {"type": "websocket.close", "code": 4401}
