"""Bad input is never a 500 (the HTTP side; the websocket's is chat/tests/test_socket_security.py).

Every case answers a clear 4xx in the contract's error shape on REST search and chat and on
/v1/chat/completions (413 for size), and full-text search copes with any text.
"""

from __future__ import annotations

import json

import pytest

from accounts.tests.factories import make_api_key
from billing.services import credits_grant
from core.tenancy import account_context
from retrieval.search.query import hybrid_search

HANDBOOK = "# Holidays\n\nEveryone has twenty-eight days of paid holiday. Unused holiday carries over until March."

# Texts PostgreSQL's websearch_to_tsquery chokes on, or that look like tsquery syntax.
NASTY_TEXTS = [
    "-" * 33,
    "-" * 5000,
    "- " * 200,
    "-holiday " * 100,
    "!" * 100,
    "a & b | !c <-> d",
    "((((((",
    "holiday:*",
    "'holiday'",
    '"""',
    '"unterminated phrase',
    "\\",
    "or or or",
    "Привет, мир — 日本語の休日？",
    "😀" * 50,
    "holiday -" + "-" * 64 + " March",
    "<-> <2> <-> :* & | !",
    "a" * 3000,
    " ".join(["x"] * 2000),
]


def _auth(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


@pytest.fixture
def key_a(account_a):
    return make_api_key(account_a)


@pytest.fixture
def handbook(account_a, fake_llm, upload_and_ingest):
    return upload_and_ingest(account_a, "handbook.md", HANDBOOK.encode())


def _assert_error(response, status: int, code: str | None = None):
    assert response.status_code == status, (response.status_code, response.content[:300])
    error = response.json()["error"]
    assert error["message"]
    if code:
        assert error["code"] == code, error


# --- full text: any text ---------------------------------------------------------------------


def test_full_text_search_accepts_any_text(account_a, handbook):
    with account_context(account_a):
        for text in NASTY_TEXTS:
            hybrid_search(account=account_a, query=text, query_vector=[1.0] * 384, mode="fulltext")
        found = hybrid_search(account=account_a, query="--- holiday ---", query_vector=[1.0] * 384, mode="fulltext")
        quoted = hybrid_search(account=account_a, query='"paid holiday"', query_vector=[1.0] * 384, mode="fulltext")
    assert [h.document_id for h in found] == [handbook.pk]
    assert [h.document_id for h in quoted] == [handbook.pk]


@pytest.mark.parametrize("text", ["-" * 33, "-" * 4000, 'what "about -- ((holiday <-> :*'])
def test_dashes_and_operators_search_and_chat_on_every_surface(client, account_a, key_a, handbook, fake_llm, text):
    fake_llm.answer = "Twenty-eight days [Document 1]."
    # A 4,000-character question holds ~10,000 credits (its worst case, query embedding included).
    with account_context(account_a):
        credits_grant(account=account_a, amount=20_000, reason="long questions", key="long-questions")
    response = client.post("/api/v1/search/", {"query": text[:2000]}, content_type="application/json", **_auth(key_a))
    assert response.status_code == 200, response.content[:300]
    response = client.post("/api/v1/chat/", {"message": text}, content_type="application/json", **_auth(key_a))
    assert response.status_code == 200, response.content[:300]
    response = client.post(
        "/v1/chat/completions",
        {"model": "groundwork", "messages": [{"role": "user", "content": text}]},
        content_type="application/json",
        **_auth(key_a),
    )
    assert response.status_code == 200, response.content[:300]


# --- NUL bytes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/documents/?q=a%00b",
        "/api/v1/documents/?status=%00",
        "/api/v1/conversations/?cursor=%00",
        "/api/v1/credits/?x=%00",
    ],
)
def test_nul_in_query_parameters_is_400_on_the_api(client, key_a, path):
    _assert_error(client.get(path, **_auth(key_a)), 400, "bad_request")


def test_nul_in_the_dashboard_search_is_400(client_a):
    response = client_a.get("/documents/?q=holiday%00")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    "path, body",
    [
        ("/api/v1/search/", {"query": "holiday\u0000policy"}),
        ("/api/v1/chat/", {"message": "holiday\u0000policy"}),
        ("/v1/chat/completions", {"model": "groundwork", "messages": [{"role": "user", "content": "a\u0000b"}]}),
        (
            "/v1/chat/completions",
            {"model": "groundwork", "user": "\u0000", "messages": [{"role": "user", "content": "hello"}]},
        ),
    ],
)
def test_nul_in_json_strings_is_400(client, key_a, path, body):
    response = client.post(path, json.dumps(body), content_type="application/json", **_auth(key_a))
    _assert_error(response, 400)


# --- deeply nested JSON ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/search/", "/api/v1/chat/", "/v1/chat/completions"])
@pytest.mark.parametrize("depth", [10_000, 200])
def test_deeply_nested_json_is_a_clear_400(client, key_a, path, depth):
    body = '{"message": ' + "[" * depth + "]" * depth + "}"
    response = client.post(path, body, content_type="application/json", **_auth(key_a))
    _assert_error(response, 400, "malformed_request")
    assert "nest" in response.json()["error"]["message"]


# --- ids that are not ids ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "1e400",
        "-1e400",
        "1e20",
        "1.5",
        "true",
        '"1e400"',
        "99999999999999999999999",
        "9223372036854775808",
        '"abc"',
        "[1]",
        "{}",
    ],
)
def test_conversation_id_that_is_not_an_id_is_400(client, key_a, raw):
    body = '{"message": "What about holidays?", "conversation_id": ' + raw + "}"
    response = client.post("/api/v1/chat/", body, content_type="application/json", **_auth(key_a))
    _assert_error(response, 400, "invalid")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/documents/99999999999999999999999/",
        "/api/v1/conversations/9223372036854775808/",
        "/api/v1/documents/9223372036854775808/reindex/",
    ],
)
def test_ids_in_the_path_past_bigint_are_404(client, key_a, path):
    method = client.post if path.endswith("reindex/") else client.get
    _assert_error(method(path, **_auth(key_a)), 404, "not_found")


@pytest.mark.parametrize(
    "field, raw",
    [
        ("max_tokens", "1e400"),
        ("max_tokens", "99999999999999999999999"),
        ("temperature", "1e400"),
        ("temperature", "-1e400"),
    ],
)
def test_v1_numbers_out_of_range_are_400(client, key_a, field, raw):
    body = '{"model": "groundwork", "messages": [{"role": "user", "content": "hi"}], "' + field + '": ' + raw + "}"
    response = client.post("/v1/chat/completions", body, content_type="application/json", **_auth(key_a))
    _assert_error(response, 400)


# --- size ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/search/", "/api/v1/chat/", "/v1/chat/completions"])
def test_a_2_8_mb_json_body_is_413(client, key_a, path):
    body = json.dumps(
        {
            "model": "groundwork",
            "query": "x",
            "message": "x" * 2_800_000,
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    _assert_error(client.post(path, body, content_type="application/json", **_auth(key_a)), 413, "too_large")


def test_search_text_over_its_limit_is_400_not_500(client, key_a):
    response = client.post("/api/v1/search/", {"query": "-" * 5000}, content_type="application/json", **_auth(key_a))
    _assert_error(response, 400, "invalid")
