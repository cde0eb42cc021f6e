"""The Sources tab in a real browser: add a site the test serves on
loopback, watch its first sync, change a page, sync again and read the history (only the
changed page updated), then delete it; a hostile page title shows as text."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from accounts.tests.factories import make_account
from e2e.pages import log_in
from sources.tests.site import LoopbackSite
from sources.tests.site import page as html_page

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _reload_until(page, locator, text: str, timeout: float = 90) -> None:
    """The page is server-rendered: reload until the sync the worker runs has finished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if locator.first.text_content().strip() == text:
            return
        time.sleep(0.5)
        page.reload()
    expect(locator.first).to_have_text(text)


def test_add_a_site_sync_it_again_and_delete_it(new_page, stack, screenshot):
    make_account("Sources Team", owner_email="owner@sources.test")
    with LoopbackSite() as site:
        site.set("/docs/", html_page("Handbook", "The staff handbook.", ["/docs/leave", "/docs/expenses"]))
        site.set("/docs/leave", html_page("Leave", "Everyone has twenty-eight days of paid holiday a year."))
        site.set("/docs/expenses", html_page('<img src=x onerror="window.__pwned=1">Expenses', "Claims need receipts."))
        page = new_page()
        log_in(page, "owner@sources.test")
        page.goto("/documents/")
        page.get_by_role("navigation", name="Knowledge base").get_by_role("link", name="Sources").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Sources")

        page.get_by_label("Address").fill(site.url("/docs/"))
        page.get_by_label("At most this many pages").fill("10")
        page.get_by_label("Sync again").select_option("daily")
        page.get_by_role("button", name="Add and sync").click()
        expect(page.locator(".flashes")).to_contain_text("its first sync has started")
        card = page.locator("section.source")
        _reload_until(page, card.locator('[data-field="status"]'), "Idle")
        expect(card).to_contain_text("3 documents")
        expect(card).to_contain_text("synced every day")
        first = card.locator("table.syncs tbody tr").first
        expect(first.locator("td.num")).to_have_text(["3", "0", "0", "0"])

        site.set("/docs/leave", html_page("Leave", "Everyone has thirty days of paid holiday a year."))
        card.get_by_role("button", name="Sync now").click()
        expect(page.locator("table.syncs tbody tr")).to_have_count(2, timeout=5000)
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline and page.locator("table.syncs tbody tr td").nth(1).text_content() != "Succeeded"
        ):
            time.sleep(0.5)
            page.reload()
        latest = page.locator("table.syncs tbody tr").first
        expect(latest.locator("td.num")).to_have_text(["0", "1", "0", "2"])
        screenshot(page, "sources-page")

        page.goto("/documents/")
        expect(page.locator(".doc-name")).to_have_count(3)
        expect(page.get_by_text(re.compile(r'<img src=x onerror="window.__pwned=1">Expenses')).first).to_be_visible()
        assert page.locator('img[src="x"]').count() == 0 and page.evaluate("window.__pwned") is None

        page.goto("/documents/sources/")
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("section.source").get_by_role("button", name="Delete").click()
        expect(page.locator(".flashes")).to_contain_text("its documents are being removed")
        expect(page.get_by_text("No sources yet.")).to_be_visible()
