"""A real OpenID Connect provider on loopback for the single sign-on tests: oidc-provider-mock
(authlib's authorization server in Flask) served by werkzeug in a thread, behind a small WSGI
layer that can rewrite the ID token the token endpoint returns, as a hostile or broken
provider would: for another client (`aud`), with another nonce, or with a bad signature.

The rewritten tokens are signed with a key the provider's JWKS also publishes while it
tampers (so only the claim is wrong), except for "signature", signed with a key nobody
publishes, under the published key's id. Honest, the JWKS is the provider's own (one key,
no key id, as many providers have)."""

from __future__ import annotations

import base64
import json
import threading
from urllib.parse import urlsplit

import oidc_provider_mock
import pytest
import requests
import werkzeug.serving
from joserfc import jwt
from joserfc.jwk import RSAKey

TAMPER_KID = "tamper"


def _claims_of(id_token: str) -> dict:
    payload = id_token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


class _Tampering:
    def __init__(self, app):
        self.app = app
        self.mode: str | None = None
        self.requests: list[str] = []  # the paths asked for, in order
        self.key = RSAKey.generate_key(2048, parameters={"kid": TAMPER_KID}, private=True)
        self.stranger = RSAKey.generate_key(2048, parameters={"kid": TAMPER_KID}, private=True)

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        self.requests.append(path)
        if path not in ("/jwks", "/oauth2/token"):
            return self.app(environ, start_response)
        seen = {}

        def capture(status, headers, exc_info=None):
            seen.update(status=status, headers=headers)
            return lambda data: None

        body = b"".join(self.app(environ, capture))
        if path == "/jwks" and self.mode:
            data = json.loads(body)
            data["keys"].append(self.key.as_dict(private=False))
            body = json.dumps(data).encode()
        elif self.mode and seen["status"].startswith("200"):
            data = json.loads(body)
            data["id_token"] = self._rewrite(data["id_token"])
            body = json.dumps(data).encode()
        headers = [(k, v) for k, v in seen["headers"] if k.lower() != "content-length"]
        start_response(seen["status"], headers + [("Content-Length", str(len(body)))])
        return [body]

    def _rewrite(self, id_token: str) -> str:
        claims = _claims_of(id_token)
        key = self.key
        if self.mode == "audience":
            claims["aud"] = "another-application"
        elif self.mode == "issuer":
            claims["iss"] = "https://another-provider.example"
        elif self.mode == "nonce":
            claims["nonce"] = "not-the-nonce-of-this-sign-in"
        elif self.mode == "signature":
            key = self.stranger
        return jwt.encode({"alg": "RS256", "kid": TAMPER_KID}, claims, key)


class Provider:
    """`issuer`; `user(sub, **claims)` sets what the provider says about `sub`;
    `authorize(url, sub)` is the person signing in at the provider: it answers the
    authorization URL our /sso/login/ redirected to and returns the callback URL."""

    def __init__(self):
        self._tampering = _Tampering(oidc_provider_mock.app(require_nonce=True))
        self._server = werkzeug.serving.make_server("127.0.0.1", 0, self._tampering, threaded=True)
        self.issuer = f"http://127.0.0.1:{self._server.server_port}"
        self._stopped = False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> Provider:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def tamper(self, mode: str | None) -> None:
        """ "audience", "issuer", "nonce", "signature", or None (honest)."""
        self._tampering.mode = mode

    @property
    def requests(self) -> list[str]:
        return self._tampering.requests

    def user(self, sub: str, **claims) -> None:
        response = requests.put(f"{self.issuer}/users/{sub}", json=claims, timeout=10)
        assert response.status_code == 204, response.text

    def authorize(self, authorization_url: str, sub: str, deny: bool = False) -> str:
        assert authorization_url.startswith(self.issuer + "/oauth2/authorize"), authorization_url
        response = requests.post(
            authorization_url, data={"action": "deny"} if deny else {"sub": sub}, allow_redirects=False, timeout=10
        )
        assert response.status_code == 302, response.text
        return response.headers["Location"]


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


@pytest.fixture
def sso_provider(settings):
    """A provider on loopback, set up as this server's single sign-on (client "tests")."""
    provider = Provider().start()
    settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = provider.issuer, "tests", "secret"
    yield provider
    provider.stop()


def sso_sign_in(client, provider: Provider, user, start: str = "/sso/login/"):
    """The person clicks "Sign in with SSO" (`start`), signs in at the provider as `user` (a
    verified address), and comes back: the client's session is then signed in with SSO."""
    provider.user(f"sub-{user.pk}", email=user.email, email_verified=True)
    started = client.get(start)
    assert started.status_code == 302, started.content
    assert client.get(path_of(provider.authorize(started["Location"], f"sub-{user.pk}"))).status_code == 302
    return client
