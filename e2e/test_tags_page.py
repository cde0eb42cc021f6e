"""Tags on the Knowledge base in a real browser: edit a document's tags with
its small form, exclude a tag for the account, and see the document marked "Excluded from
answers"; a tag written as HTML shows as text and never runs; filter by a tag."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from playwright.sync_api import expect

from accounts.tests.factories import make_account
from core.tenancy import account_context
from documents.services import document_upload
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

READY_TIMEOUT = 60_000
EVIL = "<b onmouseover=window.__pwned=1>x</b>"


def _upload(account, name: str, text: str):
    with account_context(account):
        document, _ = document_upload(
            account=account, actor=None, upload=SimpleUploadedFile(name, text.encode(), content_type="text/plain")
        )
    return document


def test_edit_a_tag_then_exclude_it_and_see_the_document_excluded(new_page, stack, screenshot):
    account = make_account("Tags Team", owner_email="owner@tags.test")
    board = _upload(account, "board-minutes.txt", "The board met on Tuesday and discussed the budget.")
    _upload(account, "handbook.txt", "Everyone has twenty-eight days of paid holiday a year.")
    page = new_page()
    log_in(page, "owner@tags.test")
    page.goto("/documents/")
    expect(page.locator('[data-field="status"]')).to_have_text(["Ready", "Ready"], timeout=READY_TIMEOUT)

    row = page.locator(f'tr[data-document-id="{board.pk}"]')
    row.get_by_text("Edit tags").click()
    row.get_by_label("Tags of board-minutes.txt, separated by commas").fill(f"Confidential, {EVIL}")
    row.get_by_role("button", name="Save tags").click()
    row = page.locator(f'tr[data-document-id="{board.pk}"]')
    tags = row.get_by_role("list", name="Tags of board-minutes.txt")
    expect(tags.get_by_role("listitem")).to_have_text(["Confidential", EVIL])
    assert row.locator(".tag-list b").count() == 0
    expect(row.locator('[data-field="excluded"]')).to_have_count(0)

    page.get_by_label("Excluded tags").fill("confidential")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_text("Documents tagged confidential are excluded from answers.")).to_be_visible()
    row = page.locator(f'tr[data-document-id="{board.pk}"]')
    expect(row.locator('[data-field="excluded"]')).to_have_text("Excluded from answers")
    other = page.locator("tr[data-document-id]").filter(has_text="handbook.txt")
    expect(other.locator('[data-field="excluded"]')).to_have_count(0)
    screenshot(page, "knowledge-base-excluded-tag")

    # The tag filter: one click on a tag shows only the documents carrying it.
    row.get_by_role("link", name="Confidential").click()
    expect(page.locator("tr[data-document-id]")).to_have_count(1)
    expect(page.locator("tr[data-document-id] .doc-name")).to_have_text("board-minutes.txt")
    assert page.evaluate("window.__pwned") is None
