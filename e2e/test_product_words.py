"""Words that match the product, in a real browser, one visit per page: a one-chunk upload reads
"Ready: 1 chunk, …" as the live note, the live row's words follow its counts, the chat
answer's footer shows its credits (chat.done's credits_charged, not its tokens), and the
Credits page shows the prices in effect."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from accounts.tests.factories import make_account
from billing.services import credits_grant
from core.tenancy import account_context
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_counts_credits_and_prices_read_right(new_page, stack):
    account = make_account("Words", owner_email="owner@words.test")
    with account_context(account):
        credits_grant(account=account, amount=50_000, reason="words test", key="grant:words")
    page = new_page()
    log_in(page, "owner@words.test")
    page.goto("/documents/")
    page.locator("#file-input").set_input_files(
        [{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"Our office opens at nine."}]
    )
    note = page.locator("#upload-progress li").first
    expect(note).to_contain_text(
        re.compile(r"Ready: 1 chunk, [\d,]+ tokens? embedded, [\d,]+ credits?\."), timeout=60_000
    )
    expect(note).not_to_contain_text("1 chunks")
    row = page.locator("#documents-table tr", has=page.get_by_role("link", name="notes.txt"))
    expect(row.locator('td[data-label="Charged"]')).to_have_text(re.compile(r"^[\d,]+ tokens? · [\d,]+ credits?$"))
    title = row.locator('td[data-label="Charged"] > span').get_attribute("title")
    assert title and "credits per 1,000 tokens" in title, title

    page.goto("/chat/")
    expect(page.locator("#connection")).to_have_text("Connected")
    page.get_by_label("Your question").fill("When does the office open?")
    page.get_by_label("Your question").press("Enter")
    expect(page.locator(".message.streaming")).to_have_count(0, timeout=30_000)
    foot = page.locator(".message.assistant").last.locator(".message-foot")
    expect(foot).to_contain_text(re.compile(r"\b[\d,]+ credits?\b"))

    page.goto("/credits/")
    prices = page.locator("#prices-table")
    expect(prices.locator("tbody tr").first).to_be_visible()
    expect(prices).to_contain_text("Chat")
    expect(prices).to_contain_text("any other embedding model")
