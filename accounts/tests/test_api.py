"""The API platform: API-key and session auth, the contract's JSON errors, isolation."""

import pytest
from django.test import Client

from accounts import services
from accounts.models import ApiKey
from accounts.tests.factories import make_api_key
from core.tenancy import account_context


def _bearer(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def _error(response, status, code=None):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and body["error"]["message"]
    if code:
        assert body["error"]["code"] == code
    assert b"Traceback" not in response.content
    return body["error"]


def test_api_key_names_its_account(client, account_a, account_b):
    key_b = make_api_key(account_b)
    body = client.get("/api/v1/account/", **_bearer(key_b)).json()
    assert body["id"] == account_b.pk and body["auth"] == "api_key"


def test_api_key_use_is_recorded(client, account_a):
    key = make_api_key(account_a)
    client.get("/api/v1/account/", **_bearer(key))
    with account_context(account_a):
        assert ApiKey.objects.for_account(account_a).get().last_used_at is not None


def test_no_key_is_401_json(client, db):
    error = _error(client.get("/api/v1/account/"), 401, "unauthenticated")
    assert "API key" in error["message"] or "Authentication" in error["message"]


@pytest.mark.parametrize("header", ["Bearer gw_unknown", "Bearer ", "Bearer nonsense", "Bearer " + "x" * 500])
def test_unknown_key_is_401_json(client, db, header):
    response = client.get("/api/v1/account/", HTTP_AUTHORIZATION=header)
    error = _error(response, 401, "invalid_api_key")
    assert "revoked" in error["message"]
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_revoked_key_is_401(client, account_a, owner_a):
    raw = make_api_key(account_a)
    with account_context(account_a):
        key = ApiKey.objects.for_account(account_a).get()
        services.api_key_revoke(account=account_a, actor=None, key_id=key.pk)
    _error(client.get("/api/v1/account/", **_bearer(raw)), 401, "invalid_api_key")


def test_inactive_user_session_is_401(client, account_a, owner_a):
    client.force_login(owner_a)
    owner_a.is_active = False
    owner_a.save()
    _error(client.get("/api/v1/account/"), 401)


def test_session_auth_works_and_enforces_csrf(account_a, owner_a):
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(owner_a)
    body = csrf_client.get("/api/v1/account/").json()
    assert body["id"] == account_a.pk and body["role"] == "owner" and body["auth"] == "session"
    error = _error(csrf_client.post("/api/v1/account/", data="{}", content_type="application/json"), 403)
    assert "CSRF" in error["message"]


@pytest.mark.urls("accounts.tests.urls_testing")
def test_malformed_json_is_400(client, account_a):
    key = make_api_key(account_a)
    ok = client.post("/api/v1/_echo/", {"a": 1}, content_type="application/json", **_bearer(key))
    assert ok.json() == {"received": {"a": 1}}
    response = client.post("/api/v1/_echo/", "{not json", content_type="application/json", **_bearer(key))
    _error(response, 400, "malformed_request")


def test_unrouted_api_path_is_json_404(client, db):
    _error(client.get("/api/v1/does-not-exist/"), 404, "not_found")
    _error(client.get("/v1/nothing-here"), 404, "not_found")


def test_method_not_allowed_is_json_405(client, account_a):
    key = make_api_key(account_a)
    # (DELETE is deleting the account, for an owner's session.)
    _error(client.put("/api/v1/account/", **_bearer(key)), 405, "method_not_allowed")


@pytest.mark.urls("accounts.tests.urls_testing")
def test_unexpected_exception_is_json_500_without_traceback(account_a):
    key = make_api_key(account_a)
    client = Client(raise_request_exception=False)
    error = _error(client.get("/api/v1/_boom/", **_bearer(key)), 500, "server_error")
    assert "logged" in error["message"]


def test_non_api_pages_keep_html_404(client, db):
    response = client.get("/no-such-page/")
    assert response.status_code == 404 and b"<html" in response.content


def test_openapi_schema_and_docs(client, db):
    schema = client.get("/api/schema/")
    assert schema.status_code == 200 and b"openapi" in schema.content
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()


def test_rate_limit_is_429_json(client, account_a, settings):
    from django.core.cache import cache

    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"account": "2/min"}}
    key = make_api_key(account_a)
    cache.clear()
    try:
        codes = [client.get("/api/v1/account/", **_bearer(key)).status_code for _ in range(2)]
        assert codes == [200, 200]
        response = client.get("/api/v1/account/", **_bearer(key))
        _error(response, 429, "rate_limited")
        assert int(response["Retry-After"]) > 0
        # Another account has its own allowance.
    finally:
        cache.clear()
