"""Buying credits in the browser: Credits → Buy → Stripe's checkout (the loopback stand-in,
billing/tests/stripe_standin.py) → the test "pays" by sending Stripe's signed event to the
stack's daphne → back on Credits the balance, the thank-you and the receipt show. Also proves
the Content-Security-Policy lets the Buy form's redirect reach the checkout."""

from __future__ import annotations

import socket

import pytest
from playwright.sync_api import expect

from accounts.tests.factories import make_account
from billing.models import Purchase
from billing.selectors import balance_get
from billing.tests.stripe_standin import StripeStandIn
from core.tenancy import account_context
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SECRET = "whsec_e2e_groundwork"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


STRIPE_PORT = _free_port()
STACK_ENV = {
    "STRIPE_SECRET_KEY": "sk_test_e2e",
    "STRIPE_WEBHOOK_SECRET": SECRET,
    "STRIPE_API_BASE": f"http://127.0.0.1:{STRIPE_PORT}",
}


@pytest.fixture(scope="module")
def stripe_server():
    server = StripeStandIn(secret_key="sk_test_e2e", port=STRIPE_PORT).start()
    yield server
    server.stop()


def test_owner_buys_credits_and_sees_them_with_the_receipt(new_page, screenshot, stack, stripe_server):
    account = make_account("Buying Team", owner_email="owner@buying.test")
    with account_context(account):
        before = balance_get(account=account)
    page = new_page()
    log_in(page, "owner@buying.test")
    page.goto("/credits/")
    buy = page.locator("#buy")
    expect(buy.get_by_role("heading", name="Buy credits")).to_be_visible()
    buy.get_by_label("50,000 credits, 5.00 USD").check()
    buy.get_by_role("button", name="Buy with Stripe").click()

    expect(page.get_by_role("heading", name="Pay Groundwork")).to_be_visible()
    session_id = page.url.rsplit("/", 1)[1]
    assert page.url.startswith(stripe_server.base_url) and session_id.startswith("cs_test_")
    assert page.locator("#amount").inner_text() == "500 usd"

    paid = stripe_server.pay(session_id)
    status, body = stripe_server.deliver(
        stack.url("/billing/stripe/webhook/"), stripe_server.event("checkout.session.completed", paid), SECRET
    )
    assert status == 200 and '"granted"' in body, body

    page.get_by_role("link", name="Back").click()
    expect(page.locator("#buy-returned")).to_contain_text("50,000 credits were added")
    expect(page.locator("#credits-balance")).to_have_text(f"{before + 50_000:,}")
    row = page.locator("#purchases-table tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("50,000")
    expect(row).to_contain_text("5.00 USD")
    expect(row).to_contain_text("Paid")
    expect(row.get_by_role("link", name="Stripe receipt")).to_have_attribute(
        "href", f"{stripe_server.base_url}/receipts/{session_id.removeprefix('cs_test_')}"
    )
    screenshot(page, "credits-bought")
    with account_context(account):
        [purchase] = Purchase.objects.for_account(account)
        assert purchase.status == "paid" and balance_get(account=account) == before + 50_000
