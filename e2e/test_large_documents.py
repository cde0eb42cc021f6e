"""Large documents in a real browser on a 375 x 740 phone: the Knowledge base list is a
stack of cards (names readable, Charged, Added and the buttons never cut off), Reindex keeps
the list's filters, and a long document's page shows 25 chunks at a time, its tables as
"Header: value" cards, and a citation's link lands on the cited chunk's page, scrolled to it."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from playwright.sync_api import expect

from accounts.tests.factories import make_account
from billing.services import credits_grant
from core.tenancy import account_context
from documents.services import document_upload
from documents.views import CHUNKS_PER_PAGE
from e2e.pages import log_in
from e2e.test_credits_team_pages import HEIGHT, WIDTH, _fits, _inside

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LONG_NAME = "quarterly-warehouse-inventory-export-for-the-northern-sites-final-v3.txt"


def _seed():
    account = make_account("Narrow Knowledge Base", owner_email="owner@narrow.test")
    rows = ["Item,Shelf,Note"] + [f"Widget {n:04d},Shelf {n % 40},fragile and boxed" for n in range(1500)]
    files = [
        ("inventory.csv", "\n".join(rows).encode(), "text/csv"),
        (LONG_NAME, ("Pallets are counted every night. " * 40).encode(), "text/plain"),
        ("notes.txt", b"Our office opens at nine.", "text/plain"),
    ]
    documents = {}
    with account_context(account):
        credits_grant(account=account, amount=200_000, reason="narrow knowledge base test", key="grant:narrow-kb")
        for name, data, content_type in files:
            documents[name], _ = document_upload(
                account=account, actor=None, upload=SimpleUploadedFile(name, data, content_type=content_type)
            )
    return account, documents


def test_knowledge_base_and_a_long_document_at_375px(new_page, screenshot, stack):
    _, documents = _seed()
    page = new_page(width=WIDTH, height=HEIGHT)
    log_in(page, "owner@narrow.test")
    page.goto("/documents/")
    expect(page.locator('[data-field="status"]', has_text="Ready")).to_have_count(3, timeout=60_000)
    page.reload()
    _fits(page)
    for what, selector in (
        ("document name", "a.doc-name"),
        ("charged cell", 'td[data-label="Charged"]'),
        ("added time", 'td[data-label="Added"] time'),
        ("Reindex button", "button:text('Reindex')"),
        ("Delete button", "button:text('Delete')"),
        ("status badge", '[data-field="status"]'),
    ):
        _inside(page, page.locator(f"#documents-table {selector}"), what)
    name = page.locator("a.doc-name", has_text=LONG_NAME).bounding_box()
    assert name["width"] > 200, f"the long name is squeezed into a narrow column: {name}"
    expect(page.locator('td[data-label="Charged"]').first).to_have_text(re.compile(r"^[\d,]+ tokens · [\d,]+ credits$"))
    screenshot(page, "knowledge_base_cards_375px")

    # Reindex from a filtered list comes back to the same list, with the message.
    page.goto("/documents/?q=notes&status=ready")
    page.get_by_role("button", name="Reindex notes.txt").click()
    expect(page.locator(".flash-success")).to_contain_text("Reindexing notes.txt.")
    assert page.url.endswith("/documents/?q=notes&status=ready"), page.url
    expect(page.get_by_label("Search documents by name")).to_have_value("notes")

    # A long document: 25 chunks a page, tables as cards, nothing sideways.
    inventory = documents["inventory.csv"]
    page.goto(f"/documents/{inventory.pk}/")
    expect(page.locator("article.chunk")).to_have_count(CHUNKS_PER_PAGE)
    _fits(page)
    _inside(page, page.locator("article.chunk").first.locator("td"), "table cell")
    first_cell = page.locator("article.chunk").first.locator("td").first
    assert first_cell.evaluate("e => getComputedStyle(e, '::before').content") == '"Item: "'
    height = page.evaluate("document.documentElement.scrollHeight")
    screenshot(page, "long_document_375px")

    # A citation's link: the right page, scrolled to the chunk, highlighted.
    cited = 2 * CHUNKS_PER_PAGE + 7
    page.goto(f"/documents/{inventory.pk}/?chunk={cited}#chunk-{cited}")
    chunk = page.locator(f"#chunk-{cited}")
    expect(chunk).to_have_class(re.compile(r"\bhighlight\b"))
    expect(chunk).to_be_in_viewport()
    expect(page.locator("#chunk-page-top")).to_have_value("3")
    expect(page.locator("article.chunk.highlight")).to_have_count(1)
    _fits(page)
    page.get_by_role("link", name="Next →").first.click()
    expect(page.locator(f"#chunk-{3 * CHUNKS_PER_PAGE}")).to_be_attached()
    page.locator("#chunk-page-top").fill("1")
    page.locator("#chunk-page-top").press("Enter")
    expect(page.locator("#chunk-0")).to_be_attached()
    # The whole document on one page would be pages × this tall; one page stays a few screens of cards.
    assert height < 60_000, f"one page of chunks is {height} px tall at 375 px"
