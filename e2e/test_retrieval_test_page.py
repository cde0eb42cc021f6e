"""The Knowledge base's Retrieval test tab in a real browser: type a
query, see each chunk's ranks, scores and text; a document's `<script>` shows as text and
never runs; another account's passages never appear."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from playwright.sync_api import expect

from accounts.tests.factories import make_account
from core.tenancy import account_context
from documents.services import document_upload
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

READY_TIMEOUT = 60_000
HANDBOOK = (
    "Everyone has twenty-eight days of paid holiday a year. Holiday requests go to the team lead two "
    'weeks ahead. <script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> Unused '
    "holiday days carry over until March."
)


def _upload(account, name: str, text: str):
    with account_context(account):
        document, _ = document_upload(
            account=account, actor=None, upload=SimpleUploadedFile(name, text.encode(), content_type="text/plain")
        )
    return document


def test_a_query_shows_ranks_scores_and_the_text_as_text(new_page, stack, screenshot):
    account = make_account("Retrieval Test Team", owner_email="owner@retrieval.test")
    other = make_account("Other Team", owner_email="owner@other.test")
    _upload(account, "handbook.txt", HANDBOOK)
    _upload(account, "kitchen.txt", "The kitchen fridge is emptied every Friday afternoon.")
    _upload(other, "other-secrets.txt", "Other team's holiday plans: paid holiday requests in March.")
    page = new_page()
    log_in(page, "owner@retrieval.test")
    page.goto("/documents/")
    expect(page.locator('[data-field="status"]')).to_have_text(["Ready", "Ready"], timeout=READY_TIMEOUT)
    page.get_by_role("navigation", name="Knowledge base").get_by_role("link", name="Retrieval test").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Retrieval test")
    expect(page.get_by_test_id("search-estimate")).to_have_text(re.compile(r"^\d+$"))

    page.get_by_label("Query").fill("How many paid holiday days do we get?")
    page.get_by_role("button", name="Search").click()
    results = page.locator("#retrieval-results")
    first = results.locator("article.hit").first
    expect(first.locator("header strong")).to_have_text("#1")
    expect(first.get_by_role("link", name="handbook.txt")).to_have_attribute("href", re.compile(r"\?chunk=0#chunk-0$"))
    expect(first.locator('[data-field="vector"]')).to_have_text(re.compile(r"^rank 1, similarity 0\.\d{3}$"))
    expect(first.locator('[data-field="fulltext"]')).to_have_text("rank 1")
    expect(first.locator('[data-field="passed"]')).to_contain_text("passed")
    expect(first.locator(".hit-text")).to_contain_text("<script>window.__pwned=1</script>")
    expect(first.locator(".hit-text")).to_contain_text('<img src=x onerror="window.__pwned=2">')
    assert first.locator(".hit-text script, .hit-text img").count() == 0
    assert page.evaluate("window.__pwned") is None
    expect(results.locator('[data-field="threshold"]')).to_have_text(re.compile(r"^0\.\d+$"))
    expect(results.locator('[data-field="charged"]')).to_have_text(re.compile(r"^\d+$"))
    expect(page.get_by_label("Query")).to_have_value("How many paid holiday days do we get?")
    expect(page.get_by_text("other-secrets.txt")).to_have_count(0)
    screenshot(page, "retrieval_test")

    # The other account, asking with this account's words, finds only its own document.
    page = new_page()
    log_in(page, "owner@other.test")
    page.goto("/documents/retrieval-test/")
    page.get_by_label("Query").fill(HANDBOOK)
    page.get_by_role("button", name="Search").click()
    found = page.locator("#retrieval-results")  # the query box above repeats the query
    expect(found).to_be_visible()
    expect(found.get_by_text("handbook.txt")).to_have_count(0)
    expect(found.get_by_text("twenty-eight days")).to_have_count(0)
    expect(page.get_by_text("handbook.txt")).to_have_count(0)
