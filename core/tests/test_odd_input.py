"""Odd input is never a 500. Found from outside: 500s on odd input again. Each is a 400 with the
contract's JSON error (or, on a page, the form again with the reason), never a 500."""

from __future__ import annotations

import base64
import json

import pytest

from accounts.tests.factories import make_api_key

FORGED_CURSOR = base64.b64encode(b"p=notadate&r=0").decode()


def _auth(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def _assert_error(response, status: int = 400):
    assert response.status_code == status, (response.status_code, response.content[:300])
    error = response.json()["error"]
    assert error["code"] and error["message"]


@pytest.fixture
def key_a(account_a):
    return make_api_key(account_a)


@pytest.mark.parametrize("path", ["/api/v1/documents/", "/api/v1/conversations/", "/api/v1/audit/"])
@pytest.mark.parametrize("cursor", [FORGED_CURSOR, base64.b64encode(b"o=-1&p=x").decode(), "%%%", "bm90LWEtY3Vyc29y"])
def test_a_forged_pagination_cursor_is_400(client_a, path, cursor):
    _assert_error(client_a.get(path, {"cursor": cursor}))


@pytest.mark.parametrize("role", ["user", "system"])
@pytest.mark.parametrize("text", [5, None, {}, []])
def test_a_v1_content_part_whose_text_is_not_text_is_400(client, key_a, role, text):
    messages = [{"role": role, "content": [{"type": "text", "text": text}]}]
    if role == "system":
        messages.append({"role": "user", "content": "hi"})
    body = json.dumps({"model": "groundwork", "messages": messages})
    _assert_error(client.post("/v1/chat/completions", body, content_type="application/json", **_auth(key_a)))


# "²" passes str.isdigit() but not int(); 5,000 digits pass neither int() nor a bigint.
ODD_NUMBERS = ["²", "1" * 5000, "1e3", "-5", "½", "", "  "]


@pytest.mark.parametrize("value", ODD_NUMBERS[:5])
def test_an_odd_low_balance_threshold_is_400(client_a, value):
    response = client_a.put("/api/v1/billing/", {"low_balance_threshold": value}, content_type="application/json")
    _assert_error(response)


@pytest.mark.parametrize("value", ODD_NUMBERS)
def test_an_odd_budget_limit_is_400(client_a, owner_a, value):
    response = client_a.put(
        "/api/v1/budgets/", {"user_id": owner_a.pk, "period": "day", "limit": value}, content_type="application/json"
    )
    _assert_error(response)


@pytest.mark.parametrize("value", ODD_NUMBERS[:3])
def test_odd_numbers_on_the_billing_and_budget_forms_say_what_is_wrong(client_a, owner_a, value):
    page = client_a.post("/credits/billing/", {"contact_email": "", "low_balance_threshold": value})
    assert page.status_code == 400 and "whole number" in page.content.decode()
    page = client_a.post(
        "/credits/budgets/", {"target": f"user:{owner_a.pk}", "period": "day", "limit": value}, follow=True
    )
    assert page.status_code == 200 and "whole number" in page.content.decode()


def test_the_cursors_the_api_gives_still_page(client_a, account_a, owner_a):
    from audit.services import audit_record
    from core.tenancy import account_context

    with account_context(account_a):
        for n in range(3):
            audit_record(account=account_a, action="invitation.cancel", actor=owner_a, target=f"t{n}")
    seen, url = [], "/api/v1/audit/?page_size=1"
    while url:
        body = client_a.get(url).json()
        seen += [entry["target"] for entry in body["results"]]
        url = body["next"]
    assert {"t0", "t1", "t2"} <= set(seen) and len(seen) == len(set(seen))
