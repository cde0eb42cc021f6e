"""Buying credits with Stripe (docs/operations/stripe.md): checkout for owners only, the
webhook's signature check, credits granted once per event and once per purchase, refunds
taken back in proportion and never below zero, and one account's session never crediting
another. Stripe is the loopback stand-in (stripe_standin.py); events are signed there from
Stripe's documented scheme, so the library's check is what is tested."""

from __future__ import annotations

import json
import logging
import time

import pytest

from accounts.models import Role
from accounts.tests.factories import add_member, make_api_key
from billing.models import CreditLedgerEntry, Purchase, PurchaseStatus
from billing.selectors import balance_get
from billing.services import credits_debit
from billing.tests.stripe_standin import StripeStandIn, stripe_signature
from core.tenancy import account_context, dangerously_bypass_tenancy

SECRET = "whsec_test_groundwork"
CHECKOUT = "/api/v1/billing/checkout/"
WEBHOOK = "/billing/stripe/webhook/"


@pytest.fixture
def stripe_server(settings):
    server = StripeStandIn().start()
    settings.STRIPE_SECRET_KEY = server.secret_key
    settings.STRIPE_WEBHOOK_SECRET = SECRET
    settings.STRIPE_API_BASE = server.base_url
    settings.STRIPE_CURRENCY = "usd"
    settings.CREDIT_PACKS = [10_000, 50_000, 200_000]
    settings.CREDITS_PRICE_CENTS_PER_1K = 10
    settings.CREDITS_PURCHASE_MIN = 5_000
    settings.CREDITS_PURCHASE_MAX = 1_000_000
    yield server
    server.stop()


def _balance(account) -> int:
    with account_context(account):
        return balance_get(account=account)


def _purchases(account) -> list[Purchase]:
    with account_context(account):
        return list(Purchase.objects.for_account(account).order_by("pk"))


def _entries(account, **filters) -> list[CreditLedgerEntry]:
    with account_context(account):
        return list(CreditLedgerEntry.objects.for_account(account).filter(**filters).order_by("pk"))


def _checkout(client, credits=10_000) -> dict:
    response = client.post(CHECKOUT, {"credits": credits}, content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def _post_event(client, payload: bytes, signature: str | None = None):
    headers = {"HTTP_STRIPE_SIGNATURE": signature if signature is not None else stripe_signature(payload, SECRET)}
    return client.post(WEBHOOK, data=payload, content_type="application/json", **headers)


def _paid(client, stripe_server, credits=10_000) -> tuple[dict, dict]:
    """An owner bought `credits` and paid at Stripe; returns (the checkout's answer, the paid session)."""
    answer = _checkout(client, credits)
    session_id = answer["url"].rsplit("/", 1)[1]
    return answer, stripe_server.pay(session_id)


# --- checkout ------------------------------------------------------------------------------


def test_owner_checkout_opens_a_stripe_session_and_records_a_pending_purchase(client_a, account_a, stripe_server):
    answer = _checkout(client_a, 50_000)
    assert answer["url"].startswith(f"{stripe_server.base_url}/c/pay/cs_test_")
    assert answer["credits"] == 50_000 and answer["amount"] == 500 and answer["currency"] == "usd"
    [call] = [r for r in stripe_server.requests if r["method"] == "POST"]
    assert call["headers"]["Authorization"] == f"Bearer {stripe_server.secret_key}"
    assert call["headers"].get("Idempotency-Key", "").startswith("groundwork-purchase-")
    form = call["form"]
    assert form["mode"] == "payment"
    assert form["line_items"][0]["price_data"]["unit_amount"] == "500"
    assert form["metadata"] == {"account_id": str(account_a.pk), "credits": "50000", "purchase": answer["purchase_id"]}
    assert form["client_reference_id"] == answer["purchase_id"]
    assert form["success_url"] == ("http://testserver/credits/?checkout=done&session={CHECKOUT_SESSION_ID}#buy")
    assert form["cancel_url"] == "http://testserver/credits/?checkout=cancelled#buy"
    [purchase] = _purchases(account_a)
    assert (purchase.status, purchase.credits, purchase.amount_cents) == (PurchaseStatus.PENDING, 50_000, 500)
    assert purchase.stripe_session_id == answer["url"].rsplit("/", 1)[1]


@pytest.mark.parametrize("role", [Role.ADMIN, Role.MEMBER, Role.VIEWER])
def test_only_owners_may_check_out(client, account_a, stripe_server, role):
    client.force_login(add_member(account_a, role=role))
    response = client.post(CHECKOUT, {"credits": 10_000}, content_type="application/json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    assert _purchases(account_a) == [] and stripe_server.requests == []


def test_an_api_key_may_not_check_out(client, account_a, stripe_server):
    # Decided: a key never spends the team's money (accounts.permissions: billing.manage).
    raw = make_api_key(account_a)
    response = client.post(
        CHECKOUT, {"credits": 10_000}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert response.status_code == 403 and _purchases(account_a) == [] and stripe_server.requests == []


@pytest.mark.parametrize("credits", ["10000", 0, -10_000, 10_000.5, True, None, 4_999, 1_000_001, [10_000]])
def test_bad_amounts_are_refused_before_stripe_is_asked(client_a, account_a, stripe_server, credits):
    response = client_a.post(CHECKOUT, {"credits": credits}, content_type="application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_amount" and "5,000" in error["message"] and "1,000,000" in error["message"]
    assert _purchases(account_a) == [] and stripe_server.requests == []


def test_a_body_without_credits_is_refused(client_a, account_a, stripe_server):
    assert client_a.post(CHECKOUT, "[1]", content_type="application/json").status_code == 400
    assert client_a.post(CHECKOUT, {}, content_type="application/json").status_code == 400
    assert _purchases(account_a) == []


def test_without_stripe_settings_checkout_says_so(client_a, account_a, settings):
    settings.STRIPE_SECRET_KEY = ""
    response = client_a.post(CHECKOUT, {"credits": 10_000}, content_type="application/json")
    assert response.status_code == 503 and response.json()["error"]["code"] == "stripe_not_configured"
    html = client_a.get("/credits/").content.decode()
    assert 'id="buy-unavailable"' in html and 'id="buy-form"' not in html
    assert _purchases(account_a) == []


def test_stripe_down_records_nothing(client_a, account_a, stripe_server):
    stripe_server.fail_creates = True
    response = client_a.post(CHECKOUT, {"credits": 10_000}, content_type="application/json")
    assert response.status_code == 502 and response.json()["error"]["code"] == "stripe_unavailable"
    assert _purchases(account_a) == []


# --- the webhook: granting -------------------------------------------------------------------


def test_a_paid_session_grants_its_credits_once_and_a_replay_grants_nothing(client_a, account_a, stripe_server):
    before = _balance(account_a)
    answer, session = _paid(client_a, stripe_server, 10_000)
    payload = stripe_server.event("checkout.session.completed", session, event_id="evt_paid_1")
    first = _post_event(client_a, payload)
    assert first.status_code == 200 and first.json()["outcome"] == "granted"
    assert _balance(account_a) == before + 10_000
    [entry] = _entries(account_a, idempotency_key="evt_paid_1")
    assert (
        entry.delta == 10_000 and entry.kind == "grant" and entry.reference == f"purchase:{_purchases(account_a)[0].pk}"
    )
    [purchase] = _purchases(account_a)
    assert purchase.status == PurchaseStatus.PAID and purchase.credits_granted == 10_000
    assert purchase.payment_intent_id == session["payment_intent"] and purchase.event_ids == ["evt_paid_1"]
    assert purchase.receipt_url == f"{stripe_server.base_url}/receipts/{session['id'].removeprefix('cs_test_')}"

    replay = _post_event(client_a, payload)  # Stripe retries with the same event
    assert replay.status_code == 200 and replay.json()["outcome"] == "duplicate"
    # Another event for the same session (here async_payment_succeeded) grants nothing either.
    other = _post_event(
        client_a,
        stripe_server.event(
            "checkout.session.async_payment_succeeded", dict(session, metadata="not a map"), event_id="evt_paid_2"
        ),
    )
    assert other.status_code == 200 and other.json()["outcome"] == "already_paid"
    assert _balance(account_a) == before + 10_000
    assert len(_entries(account_a, reference=f"purchase:{_purchases(account_a)[0].pk}")) == 1
    assert _purchases(account_a)[0].event_ids == ["evt_paid_1", "evt_paid_2"]


def test_an_unpaid_completion_waits_for_the_async_payment(client_a, account_a, stripe_server):
    before = _balance(account_a)
    answer = _checkout(client_a, 20_000)
    session_id = answer["url"].rsplit("/", 1)[1]
    unpaid = dict(stripe_server.public(stripe_server.sessions[session_id]), status="complete")
    assert (
        _post_event(client_a, stripe_server.event("checkout.session.completed", unpaid)).json()["outcome"]
        == "not_paid_yet"
    )
    assert _balance(account_a) == before
    paid = stripe_server.pay(session_id)
    assert (
        _post_event(client_a, stripe_server.event("checkout.session.async_payment_succeeded", paid)).json()["outcome"]
        == "granted"
    )
    assert _balance(account_a) == before + 20_000


def test_a_session_paid_for_another_amount_grants_nothing(client_a, account_a, stripe_server):
    before = _balance(account_a)
    _, session = _paid(client_a, stripe_server)
    response = _post_event(client_a, stripe_server.event("checkout.session.completed", dict(session, amount_total=1)))
    assert response.json()["outcome"] == "amount_mismatch" and _balance(account_a) == before
    assert _purchases(account_a)[0].status == PurchaseStatus.PENDING


def test_an_expired_session_is_marked_and_grants_nothing(client_a, account_a, stripe_server):
    answer = _checkout(client_a)
    session = stripe_server.public(stripe_server.sessions[answer["url"].rsplit("/", 1)[1]])
    response = _post_event(client_a, stripe_server.event("checkout.session.expired", dict(session, status="expired")))
    assert response.json()["outcome"] == "expired" and _purchases(account_a)[0].status == PurchaseStatus.EXPIRED


def test_other_event_types_are_acknowledged_and_ignored(client_a, account_a, stripe_server):
    before = _balance(account_a)
    response = _post_event(client_a, stripe_server.event("customer.created", {"id": "cus_1", "object": "customer"}))
    assert response.status_code == 200 and response.json()["outcome"] == "ignored"
    assert _balance(account_a) == before


# --- the webhook: refusing -------------------------------------------------------------------


def _refused(client, account, payload: bytes, signature: str | None, caplog) -> None:
    before = _balance(account)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="groundwork.billing.stripe"):
        response = _post_event(client, payload, signature)
    assert response.status_code == 400, response.content
    assert any("stripe webhook refused" in record.getMessage() for record in caplog.records)
    assert _balance(account) == before
    assert all(purchase.event_ids == [] for purchase in _purchases(account))


def test_bad_signatures_stale_timestamps_and_bad_json_are_refused_and_write_nothing(
    client_a, account_a, stripe_server, caplog
):
    _, session = _paid(client_a, stripe_server)
    payload = stripe_server.event("checkout.session.completed", session)
    _refused(client_a, account_a, payload, stripe_signature(payload, "whsec_someone_else"), caplog)
    _refused(client_a, account_a, payload, stripe_signature(payload, SECRET, int(time.time()) - 3600), caplog)
    _refused(client_a, account_a, payload + b" ", stripe_signature(payload, SECRET), caplog)  # body changed
    _refused(client_a, account_a, payload, "", caplog)
    _refused(client_a, account_a, payload, "t=1,v1=nothex", caplog)
    not_json = b"{not json"
    _refused(client_a, account_a, not_json, stripe_signature(not_json, SECRET), caplog)
    for signed_but_not_an_event in (
        b"[1]",
        b"null",
        b'"evt"',
        b"\xff\xfe",
        json.dumps({"id": "evt_x", "type": "checkout.session.completed"}).encode(),
        json.dumps({"id": 5, "type": "checkout.session.completed", "data": {"object": session}}).encode(),
        json.dumps({"id": "evt_y", "type": "checkout.session.completed", "data": {"object": [session]}}).encode(),
    ):
        _refused(
            client_a, account_a, signed_but_not_an_event, stripe_signature(signed_but_not_an_event, SECRET), caplog
        )
    assert _purchases(account_a)[0].status == PurchaseStatus.PENDING


def test_the_webhook_needs_no_session_or_csrf_token(account_a, stripe_server, settings):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    payload = stripe_server.event("customer.created", {"id": "cus_1"})
    response = strict.post(
        WEBHOOK, data=payload, content_type="application/json", HTTP_STRIPE_SIGNATURE=stripe_signature(payload, SECRET)
    )
    assert response.status_code == 200
    assert strict.get(WEBHOOK).status_code == 405


# --- refunds ---------------------------------------------------------------------------------


def test_refunds_take_back_credits_in_proportion_once_per_event(client_a, account_a, stripe_server):
    before = _balance(account_a)
    answer, session = _paid(client_a, stripe_server, 50_000)  # 500 cents
    _post_event(client_a, stripe_server.event("checkout.session.completed", session))
    partial = stripe_server.event("charge.refunded", stripe_server.refund(session["id"], 100), event_id="evt_r1")
    assert _post_event(client_a, partial).json()["outcome"] == "took_back_10000"
    assert _balance(account_a) == before + 40_000
    assert _post_event(client_a, partial).json()["outcome"] == "duplicate"
    assert _balance(account_a) == before + 40_000
    [purchase] = _purchases(account_a)
    assert purchase.status == PurchaseStatus.PARTIALLY_REFUNDED and purchase.credits_taken_back == 10_000
    rest = stripe_server.event("charge.refunded", stripe_server.refund(session["id"], 400), event_id="evt_r2")
    assert _post_event(client_a, rest).json()["outcome"] == "took_back_40000"
    assert _balance(account_a) == before
    [purchase] = _purchases(account_a)
    assert purchase.status == PurchaseStatus.REFUNDED and purchase.credits_taken_back == 50_000
    [first, second] = _entries(account_a, reference=f"purchase:{purchase.pk}", kind="adjustment")
    assert (first.delta, first.idempotency_key, second.delta) == (-10_000, "evt_r1", -40_000)


def test_a_refund_never_takes_the_balance_below_zero(client_a, account_a, stripe_server):
    _, session = _paid(client_a, stripe_server, 10_000)
    _post_event(client_a, stripe_server.event("checkout.session.completed", session))
    with account_context(account_a):  # the team spent all but 1,234 credits
        credits_debit(account=account_a, tokens=balance_get(account=account_a) - 1_234, key="spend", kind="chat")
    full = stripe_server.event("charge.refunded", stripe_server.refund(session["id"], session["amount_total"]))
    assert _post_event(client_a, full).json()["outcome"] == "took_back_1234"
    assert _balance(account_a) == 0
    [purchase] = _purchases(account_a)
    assert purchase.status == PurchaseStatus.REFUNDED and purchase.credits_taken_back == 1_234
    # An empty balance: a refund's event is still recorded, and takes nothing.
    again = stripe_server.event("charge.refunded", dict(stripe_server.refund(session["id"], 0), amount_refunded=999))
    assert _post_event(client_a, again).json()["outcome"] == "nothing_new" and _balance(account_a) == 0


# --- isolation -------------------------------------------------------------------------------


def test_a_session_credits_only_the_account_that_opened_it(client_a, account_a, account_b, stripe_server):
    a_before, b_before = _balance(account_a), _balance(account_b)
    _, session = _paid(client_a, stripe_server, 10_000)
    forged = dict(session, metadata={"account_id": str(account_b.pk), "credits": "10000"})
    assert (
        _post_event(client_a, stripe_server.event("checkout.session.completed", forged)).json()["outcome"] == "granted"
    )
    assert (_balance(account_a), _balance(account_b)) == (a_before + 10_000, b_before)


def test_a_session_that_is_none_of_ours_credits_nobody(client, account_a, account_b, stripe_server):
    b_before = _balance(account_b)
    stranger = {
        "id": "cs_test_forged",
        "object": "checkout.session",
        "payment_status": "paid",
        "amount_total": 100,
        "currency": "usd",
        "metadata": {"account_id": str(account_b.pk), "credits": "1000000"},
    }
    response = _post_event(client, stripe_server.event("checkout.session.completed", stranger))
    assert response.status_code == 200 and response.json()["outcome"] == "unknown_session"
    assert _balance(account_b) == b_before
    with dangerously_bypass_tenancy(reason="test: no purchase was written"):
        assert not Purchase.all_accounts.exists()


def test_another_accounts_purchases_and_return_are_not_shown(client, client_a, account_a, owner_b, stripe_server):
    _, session = _paid(client_a, stripe_server, 10_000)
    _post_event(client_a, stripe_server.event("checkout.session.completed", session))
    assert 'id="purchases-table"' in client_a.get("/credits/").content.decode()
    client.force_login(owner_b)
    html = client.get(f"/credits/?checkout=done&session={session['id']}").content.decode()
    assert 'id="purchases-table"' not in html and "credits were added" not in html


# --- the Credits page ------------------------------------------------------------------------


def test_owner_buys_a_pack_from_the_credits_page(client_a, account_a, stripe_server):
    html = client_a.get("/credits/").content.decode()
    assert 'id="buy-form"' in html and "10,000 credits, 1.00 USD" in html and "200,000 credits, 20.00 USD" in html
    response = client_a.post("/credits/buy/", {"credits": "50000"})
    assert response.status_code == 303 and response["Location"].startswith(f"{stripe_server.base_url}/c/pay/")
    custom = client_a.post("/credits/buy/", {"credits": "custom", "custom_credits": "25,000"})
    assert custom.status_code == 303
    typed = client_a.post("/credits/buy/", {"credits": "10000", "custom_credits": " 7500 "})  # typed in: wins
    assert typed.status_code == 303
    assert [p.credits for p in _purchases(account_a)] == [50_000, 25_000, 7_500]


def test_a_bad_custom_amount_shows_the_page_again_saying_why(client_a, account_a, stripe_server):
    response = client_a.post("/credits/buy/", {"credits": "custom", "custom_credits": "<b>12</b>"})
    html = response.content.decode()
    assert response.status_code == 400 and 'id="buy-error"' in html and "5,000 to 1,000,000" in html
    assert "<b>12</b>" not in html and "&lt;b&gt;12&lt;/b&gt;" in html  # escaped in the field
    assert _purchases(account_a) == []


@pytest.mark.parametrize("role", [Role.ADMIN, Role.MEMBER, Role.VIEWER])
def test_others_see_who_can_buy_and_may_not_post(client, account_a, owner_a, stripe_server, role):
    client.force_login(add_member(account_a, role=role))
    html = client.get("/credits/").content.decode()
    assert 'id="buy-owners-only"' in html and owner_a.email in html and 'id="buy-form"' not in html
    assert client.post("/credits/buy/", {"credits": "10000"}).status_code == 403
    assert _purchases(account_a) == []


def test_back_from_stripe_the_page_says_how_it_went(client_a, account_a, stripe_server):
    answer, session = _paid(client_a, stripe_server, 10_000)
    waiting = client_a.get(f"/credits/?checkout=done&session={session['id']}").content.decode()
    assert "appear here as soon as" in waiting
    _post_event(client_a, stripe_server.event("checkout.session.completed", session))
    html = client_a.get(f"/credits/?checkout=done&session={session['id']}").content.decode()
    assert "10,000 credits were added" in html and "Stripe receipt" in html and ">Paid<" in html
    assert "nothing was charged" in client_a.get("/credits/?checkout=cancelled").content.decode()


# --- deliveries at the same instant ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_deliveries_grant_once(stripe_server, settings):
    """Stripe may deliver one event twice at once, and completed/async_payment_succeeded
    for one session together: six deliveries of three events, one grant."""
    from accounts.tests.factories import make_account
    from billing.purchases.services import purchase_checkout_start, purchase_event_handle
    from billing.tests.threads import run_at_once

    account = make_account("Racing", owner_email="owner@racing.test")
    before = _balance(account)
    with account_context(account):
        checkout = purchase_checkout_start(
            account=account,
            actor=account.test_owner,
            credits=30_000,
            success_url="http://x/ok",
            cancel_url="http://x/no",
        )
    session = stripe_server.pay(checkout.purchase.stripe_session_id)
    payloads = [
        stripe_server.event("checkout.session.completed", session, event_id="evt_race_1"),
        stripe_server.event("checkout.session.completed", session, event_id="evt_race_2"),
        stripe_server.event("checkout.session.async_payment_succeeded", session, event_id="evt_race_3"),
    ]
    outcomes = []

    def deliver(n):
        payload = payloads[n % 3]
        outcomes.append(purchase_event_handle(payload=payload, signature=stripe_signature(payload, SECRET)))

    assert run_at_once(deliver, 6) == []
    assert outcomes.count("granted") == 1 and outcomes.count("duplicate") == 3
    assert _balance(account) == before + 30_000
    [purchase] = _purchases(account)
    assert sorted(purchase.event_ids) == ["evt_race_1", "evt_race_2", "evt_race_3"]
    assert len(_entries(account, reference=f"purchase:{purchase.pk}")) == 1


def test_support_sees_purchases_read_only_in_the_admin(client, client_a, account_a, stripe_server):
    from accounts.tests.factories import staff_with

    _, session = _paid(client_a, stripe_server, 10_000)
    client.force_login(staff_with("billing.view_purchase"))
    listing = client.get(f"/admin/billing/purchase/?q={session['id']}")
    assert listing.status_code == 200 and session["id"] in listing.content.decode()
    purchase = _purchases(account_a)[0]
    assert client.post(f"/admin/billing/purchase/{purchase.pk}/change/", {"credits": 1}).status_code == 403
    assert client.get("/admin/billing/purchase/add/").status_code == 403


def test_the_admin_account_page_shows_its_purchases_and_their_grants(
    client, client_a, account_a, account_b, stripe_server
):
    from accounts.tests.factories import staff_with

    _, session = _paid(client_a, stripe_server, 10_000)
    payload = stripe_server.event("checkout.session.completed", session, event_id="evt_admin_1")
    assert _post_event(client_a, payload).json()["outcome"] == "granted"
    client.force_login(staff_with("accounts.view_account", "billing.view_purchase", "billing.view_creditledgerentry"))
    page = client.get(f"/admin/accounts/account/{account_a.pk}/change/").content.decode()
    assert "Purchases (Stripe)" in page and session["id"] in page and "Paid" in page
    # The paid purchase's grant is among the account's grants, with its purchase reference.
    assert "Grants and purchases" in page and f"purchase:{_purchases(account_a)[0].pk}" in page
    other = client.get(f"/admin/accounts/account/{account_b.pk}/change/").content.decode()
    assert session["id"] not in other and "No purchases yet." in other
    # Staff without the purchase permission do not see the panel.
    client.force_login(staff_with("accounts.view_account"))
    assert "Purchases (Stripe)" not in client.get(f"/admin/accounts/account/{account_a.pk}/change/").content.decode()


@pytest.mark.parametrize("amount", ["9" * 5000, "-10000", "0", "10000.5", "1e6", "99999999999999999999999", "²⁵⁰⁰⁰"])
@pytest.mark.parametrize("field", ["custom_credits", "credits"])
def test_any_typed_amount_is_refused_on_the_page_naming_the_field(client_a, account_a, stripe_server, amount, field):
    form = {"credits": "custom", "custom_credits": amount} if field == "custom_credits" else {"credits": amount}
    response = client_a.post("/credits/buy/", form)
    html = response.content.decode()
    assert response.status_code == 400 and 'id="buy-error"' in html and "5,000 to 1,000,000" in html
    assert 'id="buy-custom-credits"' in html and 'aria-invalid="true"' in html
    assert _purchases(account_a) == [] and stripe_server.requests == []


def test_a_huge_amount_over_the_api_is_a_400(client_a, account_a, stripe_server):
    # A JSON number of 5,000 digits is refused by the JSON parser (Python's int limit), as a 400.
    response = client_a.post(CHECKOUT, '{"credits": ' + "9" * 5000 + "}", content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "malformed_request"
    response = client_a.post(CHECKOUT, {"credits": 10**400}, content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_amount"
    assert _purchases(account_a) == []


# --- prices in money, and what an operator is told --------------------------------------------


def _prices_rows(html: str) -> list[str]:
    import re

    table = html[html.index('id="prices-table"') :]
    table = table[: table.index("</table>")]
    return [re.sub(r"<[^>]+>", " ", row).split() for row in re.findall(r"<tr data-price-kind.*?</tr>", table, re.S)]


def test_with_stripe_the_credits_page_shows_prices_in_money(client_a, account_a, stripe_server, settings):
    settings.CREDITS_PER_1K_TOKENS = {"chat": 1000, "chat:big-chat": 3000, "embedding": 1000, "embedding:tiny": 13}
    settings.CHAT_MODEL = "big-chat"
    settings.CREDITS_PRICE_CENTS_PER_1K = 10
    html = client_a.get("/credits/").content.decode()
    assert "0.10 USD per 1,000 credits" in html and "10,000 credits, 1.00 USD" in html
    rows = _prices_rows(html)
    # Credits per 1,000 tokens, then their money: 3,000 credits at 0.10 USD per 1,000 = 0.30 USD;
    # 13 credits = 0.0013 USD exactly (a fraction of a cent is not rounded away).
    assert ["big-chat", "Chat", "3,000", "0.30", "USD"] in rows
    assert ["tiny", "Embedding", "13", "0.0013", "USD"] in rows
    assert "Money per 1,000 tokens" in html


def test_prices_in_a_currency_without_cents_or_with_three_decimals(client_a, account_a, stripe_server, settings):
    settings.STRIPE_CURRENCY, settings.CREDITS_PRICE_CENTS_PER_1K = "jpy", 15
    html = client_a.get("/credits/").content.decode()
    assert "15 JPY per 1,000 credits" in html and "10,000 credits, 150 JPY" in html
    settings.STRIPE_CURRENCY, settings.CREDITS_PRICE_CENTS_PER_1K = "kwd", 35
    html = client_a.get("/credits/").content.decode()
    assert "0.035 KWD per 1,000 credits" in html and "10,000 credits, 0.350 KWD" in html


def test_without_stripe_prices_are_in_credits_only(client_a, account_a, settings):
    settings.STRIPE_SECRET_KEY = ""
    html = client_a.get("/credits/").content.decode()
    assert 'id="prices-table"' in html and "Money per 1,000 tokens" not in html


def test_without_stripe_an_owner_who_runs_the_server_is_told_what_to_set(client, owner_a, account_a, settings):
    settings.STRIPE_SECRET_KEY, settings.DEBUG = "", False
    owner_a.is_staff = True
    owner_a.save()
    client.force_login(owner_a)
    html = client.get("/credits/").content.decode()
    unavailable = html[html.index('id="buy-unavailable"') :].split("</p>")[0]
    assert "STRIPE_SECRET_KEY" in unavailable and "STRIPE_WEBHOOK_SECRET" in unavailable
    assert f"manage.py grant_credits {account_a.pk}" in unavailable
    assert "ask support" not in html.lower()


def test_without_stripe_on_a_local_install_the_owner_is_told_what_to_set(client_a, account_a, settings):
    settings.STRIPE_SECRET_KEY, settings.DEBUG = "", True
    html = client_a.get("/credits/").content.decode()
    assert "manage.py grant_credits" in html and "ask support" not in html.lower()


def test_without_stripe_an_owner_of_a_hosted_server_asks_support(client_a, account_a, settings):
    settings.STRIPE_SECRET_KEY, settings.DEBUG, settings.LOCAL_RUN = "", False, False
    html = client_a.get("/credits/").content.decode()
    unavailable = html[html.index('id="buy-unavailable"') :].split("</p>")[0]
    assert "ask support" in unavailable.lower()
    assert "STRIPE_SECRET_KEY" not in html and "grant_credits" not in html
