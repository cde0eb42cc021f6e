"""Money is one type with its currency's precision (billing/money.py): a purchase's amounts
read as Money, and the admin's changelist, the account page's purchases and the Credits page
show 2 decimals for USD, none for JPY and 3 for KWD."""

import re
from decimal import Decimal

import pytest

from accounts.tests.factories import staff_with
from billing.money import Money, purchase_amount_minor, purchase_price
from billing.purchases.models import Purchase, PurchaseStatus
from core.tenancy import account_context

pytestmark = pytest.mark.django_db
# (amount in the smallest unit, currency, refunded) -> how it reads.
PAID = [(500, "usd", 0, "5.00 USD"), (1500, "jpy", 300, "1,500 JPY"), (1250, "kwd", 0, "1.250 KWD")]


def _purchases(account):
    with account_context(account):
        for n, (minor, currency, refunded, _) in enumerate(PAID):
            Purchase.objects.for_account(account).create(
                account=account,
                stripe_session_id=f"cs_test_{n}",
                credits=10_000,
                amount_cents=minor,
                currency=currency,
                refunded_cents=refunded,
                status=PurchaseStatus.PAID,
                credits_granted=10_000,
            )


def _cells(html: str, row_start: str) -> list[list[str]]:
    rows = re.findall(rf"{row_start}.*?</tr>", html, re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in rows]


def test_amounts_in_the_currencys_decimals():
    assert [str(Money.of_minor(m, c)) for m, c, _, _ in PAID] == [shown for *_, shown in PAID]
    assert str(Money.of_minor(1500, "jpy") - Money.of_minor(300, "jpy")) == "1,200 JPY"
    assert Money.of_minor(13, "usd").amount == Decimal("0.13")
    assert (Money.of_minor(1, "usd") / 3).minor_rounded_up() == 1
    with pytest.raises(ValueError):
        Money.of_minor(1, "usd") - Money.of_minor(1, "jpy")


@pytest.mark.parametrize(
    "currency, price, minor, shown",
    [
        ("usd", 10, 100, "1.00 USD"),
        ("jpy", 15, 150, "150 JPY"),
        ("kwd", 35, 350, "0.350 KWD"),
        ("usd", 1, 1, "0.01 USD"),
    ],
)  # 0.001 USD for 1,000 credits, rounded up to a whole cent
def test_a_purchase_charges_its_exact_price_rounded_up(settings, currency, price, minor, shown):
    settings.STRIPE_CURRENCY, settings.CREDITS_PRICE_CENTS_PER_1K = currency, price
    credits = 10_000 if price != 1 else 1_000
    assert purchase_amount_minor(credits) == minor and str(purchase_price(credits)) == shown


def test_the_admin_changelist_shows_each_purchase_in_its_currency(client, account_a):
    _purchases(account_a)
    client.force_login(staff_with("billing.view_purchase"))
    html = client.get("/admin/billing/purchase/").content.decode()
    assert "5.00 USD" in html and "1,500 JPY" in html and "1.250 KWD" in html and "300 JPY" in html
    # The stored smallest units are never shown as an amount.
    assert not re.search(r'class="field-amount[^"]*">\s*(500|1500|1250)\s*<', html)
    assert ">5 USD<" not in html and "15.00 JPY" not in html and "12.50 KWD" not in html


def test_the_account_page_shows_purchases_in_their_currency(client, account_a):
    _purchases(account_a)
    client.force_login(staff_with("accounts.view_account", "billing.view_purchase"))
    html = client.get(f"/admin/accounts/account/{account_a.pk}/change/").content.decode()
    assert "5.00 USD" in html and "1,500 JPY" in html and "1.250 KWD" in html


def test_the_credits_page_lists_purchases_in_their_currency(client_a, account_a, settings):
    settings.STRIPE_SECRET_KEY, settings.STRIPE_WEBHOOK_SECRET = "sk_test_x", "whsec_x"
    _purchases(account_a)
    html = client_a.get("/credits/").content.decode()
    assert {shown for *_, shown in PAID} <= set(re.findall(r'data-label="Amount" class="num">([^<]+)<', html))
