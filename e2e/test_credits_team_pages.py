"""The Credits and Team pages on a 375 x 740 phone.

Nothing scrolls the page sideways, and no ledger column, role control, Remove or Revoke
button is cut off: below 600px their tables stack into one card per row."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from accounts.models import Role
from accounts.tests.factories import add_member, make_account, make_api_key, make_user
from billing.selectors import balance_get
from billing.services import credits_debit, credits_grant, credits_hold, hold_settle
from core.tenancy import account_context
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTH, HEIGHT = 375, 740


def _seed():
    account = make_account("Narrow Credits & Team Limited", owner_email="owner@narrow.test")
    add_member(account, make_user("a.member.with.a.rather.long.address@subdomain.narrow.test"), role=Role.ADMIN)
    make_api_key(account, name="nightly-import-from-the-accounting-system")
    make_api_key(account, name="ci")
    with account_context(account):
        credits_grant(
            account=account,
            amount=12_345_678,
            reason="Annual plan for the whole team, invoice 2024-0042",
            key="grant:annual",
        )
        hold = credits_hold(account=account, amount=40_000, key="chat:1", reference="message:9")
        credits_debit(
            account=account,
            tokens=123_456,
            key="emb:1",
            kind="embedding",
            reference="document:7:rev1",
            model="all-minilm-l6-v2",
        )
        hold_settle(hold=hold, used_tokens=15_000, reference="message:9", model="smollm2-360m-instruct")
        credits_hold(account=account, amount=4_000, key="chat:2", reference="message:10")  # still open
    return account


def _fits(page):
    widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] <= widths[1], f"{page.url} scrolls sideways: scrollWidth {widths[0]} > clientWidth {widths[1]}"


def _inside(page, locator, what):
    """Every match is laid out wholly inside the viewport's width and not clipped by a scroller."""
    count = locator.count()
    assert count, f"no {what} on {page.url}"
    for i in range(count):
        item = locator.nth(i)
        item.scroll_into_view_if_needed()
        box = item.bounding_box()
        assert box and box["width"] > 0, f"{what} #{i} is not visible"
        assert box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, f"{what} #{i} is cut off: {box}"
        clipped = item.evaluate("""e => { for (let p = e.parentElement; p; p = p.parentElement) {
            const r = p.getBoundingClientRect(), b = e.getBoundingClientRect();
            if (getComputedStyle(p).overflowX !== 'visible' && (b.left < r.left - 0.5 || b.right > r.right + 0.5)) return true;
          } return false; }""")
        assert not clipped, f"{what} #{i} is hidden inside a scrolling box"


def test_credits_and_team_pages_fit_375px(new_page, screenshot, stack):
    account = _seed()
    with account_context(account):
        balance = balance_get(account=account)
    page = new_page(width=WIDTH, height=HEIGHT)
    log_in(page, "owner@narrow.test")

    page.goto("/credits/")
    expect(page.locator("#credits-balance")).to_have_text(f"{balance:,}")
    expect(page.locator("#ledger-held")).to_be_visible()
    expect(page.locator("#ledger-table")).to_contain_text("Annual plan for the whole team")
    _fits(page)
    for label in ("When", "Kind", "Change", "Tokens", "Balance after", "For"):
        _inside(page, page.locator(f'#ledger-table td[data-label="{label}"]'), f"ledger {label}")
    screenshot(page, "credits_375px")

    page.goto("/credits/?holds=1")
    _fits(page)
    _inside(page, page.locator('#ledger-table td[data-label="Balance after"]'), "ledger balance with holds")

    page.goto("/team/")
    _fits(page)
    _inside(page, page.locator("#members-table select"), "role select")
    _inside(page, page.get_by_role("button", name="Change"), "Change button")
    _inside(page, page.locator("#members-table").get_by_role("button", name="Remove"), "Remove button")
    revoke = page.get_by_role("button", name="Revoke nightly-import-from-the-accounting-system")
    expect(revoke).to_be_visible()
    _inside(page, revoke, "Revoke button")
    _inside(page, page.locator("#api-keys-table").get_by_role("button", name="Revoke"), "Revoke buttons")
    screenshot(page, "team_375px")


def test_wide_screen_keeps_the_tables(new_page, stack):
    _seed()
    page = new_page()
    log_in(page, "owner@narrow.test")
    page.goto("/credits/")
    expect(page.locator("#ledger-table thead")).to_be_visible()
    _fits(page)
    page.goto("/team/")
    expect(page.locator("#api-keys-table thead")).to_be_visible()
    _fits(page)
