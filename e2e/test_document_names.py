"""Document names on a 1366 px laptop screen: a long file name wraps between its parts
("price-list-2026.xlsx" as "price-list-" / "2026.xlsx"), never inside one ("price-list-2026.xls"
/ "x"), and a name too long for its table cell ends in an ellipsis with the whole name on hover."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from playwright.sync_api import expect

from accounts.tests.factories import make_account
from billing.services import credits_grant
from core.tenancy import account_context
from documents.services import document_upload
from documents.tests.files import make_pdf
from documents.tests.office_files import make_docx_bytes, make_xlsx
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
FILES = [
    ("price-list-2026.xlsx", make_xlsx, XLSX),
    ("customer_onboarding_checklist_emea_2026_v2.docx", make_docx_bytes, DOCX),
    (
        "annual-general-meeting-minutes-and-resolutions-approved-by-the-board.pdf",
        lambda: make_pdf(["The annual general meeting approved the budget."]),
        "application/pdf",
    ),
]
UPLOADED_ON_THE_PAGE = "supplier.price.list.2026-Q3_final.txt"

# Where a name's lines break after a character that is not a separator (- _ . / or a space):
# "price-list-2026.xls|x", a word broken inside. Each character's line is the top of its box.
MID_WORD_BREAKS = """els => els.flatMap(el => {
  const text = el.textContent, range = document.createRange(), tops = [];
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.textContent.length; i++) {
      range.setStart(node, i); range.setEnd(node, i + 1);
      const box = range.getClientRects()[0];
      tops.push(box ? Math.round(box.top) : null);
    }
  }
  const breaks = [];
  for (let i = 1; i < tops.length; i++) {
    if (tops[i] !== null && tops[i - 1] !== null && tops[i] > tops[i - 1] && !/[-_./\\s]/.test(text[i - 1])) {
      breaks.push(text.slice(Math.max(0, i - 12), i) + "|" + text.slice(i, i + 6));
    }
  }
  return breaks;
})"""


def _seed():
    account = make_account("Laptop Knowledge Base", owner_email="owner@laptop.test")
    with account_context(account):
        credits_grant(account=account, amount=100_000, reason="document names test", key="grant:names")
        for name, make, content_type in FILES:
            document_upload(
                account=account, actor=None, upload=SimpleUploadedFile(name, make(), content_type=content_type)
            )


def _names_hold(page, count: int) -> None:
    names = page.locator("#documents-table a.doc-name")
    expect(names).to_have_count(count)
    assert names.evaluate_all(MID_WORD_BREAKS) == []
    for name in names.all():  # the whole name on hover, whatever is cut off
        assert name.get_attribute("title") == name.text_content()


def test_names_wrap_between_their_parts_at_1366px(new_page, screenshot, stack):
    _seed()
    page = new_page(width=1366, height=768)
    log_in(page, "owner@laptop.test")
    page.goto("/documents/")
    expect(page.locator('[data-field="status"]', has_text="Ready")).to_have_count(len(FILES), timeout=60_000)
    _names_hold(page, len(FILES))
    # A row the page adds itself for an upload (static/js/knowledge_base.js) breaks the same way.
    page.locator("#file-input").set_input_files(
        [{"name": UPLOADED_ON_THE_PAGE, "mimeType": "text/plain", "buffer": b"Supplier prices for the third quarter."}]
    )
    expect(page.locator("#documents-table a.doc-name", has_text="supplier")).to_have_count(1, timeout=60_000)
    _names_hold(page, len(FILES) + 1)
    screenshot(page, "knowledge_base_names_1366px")
    page.reload()
    _names_hold(page, len(FILES) + 1)
