"""/ws/chat/ and the owner's switch "Members must sign in with SSO" (accounts/sso/): a
password session is refused (4401, as no access); a session signed in through the provider
(a real one on loopback, accounts/tests/oidc_provider.py) chats; an API key is unaffected."""
import pytest
from django.conf import settings as django_settings
from django.test import Client

from accounts.models import Account
from accounts.tests.factories import make_api_key
from accounts.tests.oidc_provider import Provider, path_of
from chat.tests.test_websocket import Socket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def provider(settings):
    provider = Provider().start()
    settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = provider.issuer, "tests", "secret"
    yield provider
    provider.stop()


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

    provider.user("owner", email=owner_a.email, email_verified=True)
    sso = Client()
    start = sso.get("/sso/login/")
    assert sso.get(path_of(provider.authorize(start["Location"], "owner"))).status_code == 302
    allowed = Socket(_headers(sso))
    assert allowed.connect()[0]
    assert allowed.ask("What is our holiday policy?")[-1]["type"] == "chat.done"

    key = Socket([(b"authorization", f"Bearer {make_api_key(account_a)}".encode())])
    assert key.connect()[0]
    assert key.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
