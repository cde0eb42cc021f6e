"""Conversations people manage, in a real browser against the real stack: a person renames a
conversation from the keyboard, copies an answer with its citations, regenerates it (the old
answer stays folded as a previous version), finds conversations with the search box and
deletes one through the confirmation dialog; titles stay text everywhere."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from playwright.sync_api import expect

from accounts.tests.factories import make_account
from billing.services import credits_grant
from chat.models import Conversation, Message
from core.tenancy import account_context
from documents.services import document_upload
from e2e.conftest import ANSWER
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

READY_TIMEOUT = 60_000
FIRST = "Everyone gets twenty-eight days of holiday [Document 1]."
SECOND = "Holidays: **twenty-eight days** a year, carried over until March [Document 1]."
HOSTILE_TITLE = 'Holiday <img src=x onerror="window.__pwned=1"> rules'


def test_rename_copy_regenerate_search_and_delete(new_page, screenshot, stack):
    account = make_account("Conversations Team", owner_email="owner@conversations.test")
    with account_context(account):
        credits_grant(account=account, amount=50_000, reason="conversations test")
        document_upload(
            account=account,
            actor=None,
            upload=SimpleUploadedFile(
                "holidays.md",
                b"# Holidays\n\nEveryone has twenty-eight days of paid holiday a year.",
                content_type="text/markdown",
            ),
        )
    stack.model.answer = FIRST
    try:
        page = new_page()
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.base_url)
        log_in(page, "owner@conversations.test")
        page.goto("/documents/")
        expect(page.locator('[data-field="status"]').first).to_have_text("Ready", timeout=READY_TIMEOUT)
        page.goto("/chat/")
        expect(page.locator("#conversations-privacy")).to_contain_text("Only you can see your conversations")
        expect(page.locator("#connection")).to_have_text("Connected")
        page.get_by_label("Your question").fill("How much holiday do we get?")
        page.get_by_label("Your question").press("Enter")
        expect(page.locator(".message.streaming")).to_have_count(0, timeout=30_000)
        answer = page.locator(".message.assistant").last
        expect(answer.locator(".bubble")).to_contain_text("twenty-eight days of holiday")

        # Rename, from the keyboard: Enter on the button, type, Escape cancels, Enter saves.
        page.get_by_role("button", name="Rename").press("Enter")
        title = page.get_by_label("Conversation title")
        expect(title).to_be_focused()
        title.fill("Not this one")
        title.press("Escape")
        expect(page.locator("#chat-heading")).to_have_text("How much holiday do we get?")
        expect(page.get_by_role("button", name="Rename")).to_be_focused()
        page.keyboard.press("Enter")
        title.fill(HOSTILE_TITLE)
        title.press("Enter")
        expect(page.locator("#chat-heading")).to_have_text(HOSTILE_TITLE)
        expect(page.locator("#conversation-list .title").first).to_have_text(HOSTILE_TITLE)
        with account_context(account):
            conversation = Conversation.objects.for_account(account).get()
        assert conversation.title == HOSTILE_TITLE

        # Copy: the answer's text with its cited sources, as plain text.
        answer.get_by_role("button", name="Copy").click()
        expect(answer.get_by_role("button", name="Copied")).to_be_visible()
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied.startswith(FIRST) and "\n\nSources:\n[1] holidays.md, chunk #0" in copied
        # Where the page is not a secure context (plain http on a LAN address), the fallback copies.
        page.evaluate("navigator.clipboard.writeText('')")
        page.evaluate("Object.defineProperty(window, 'isSecureContext', {value: false})")
        answer.get_by_role("button", name="Copy").click()
        expect(answer.get_by_role("button", name="Copied")).to_be_visible()
        assert page.evaluate("navigator.clipboard.readText()") == copied

        # Regenerate: a new answer below, the old one folded above it as a previous version.
        stack.model.answer = SECOND
        answer.get_by_role("button", name="Regenerate").click()
        expect(page.locator(".message.streaming")).to_have_count(0, timeout=30_000)
        expect(page.locator(".message.assistant")).to_have_count(2)
        previous = page.locator(".message.assistant.previous-version")
        expect(previous).to_have_count(1)
        expect(previous.locator("summary")).to_have_text("Previous version of the answer below")
        latest = page.locator(".message.assistant").last
        expect(latest.locator(".bubble strong")).to_have_text("twenty-eight days")
        expect(latest.get_by_role("button", name="Regenerate")).to_be_visible()
        expect(page.locator(".message.user")).to_have_count(1)
        with account_context(account):
            old, new = Message.objects.for_account(account).filter(role="assistant").order_by("pk")
        assert old.replaced_by_id == new.pk and new.content == SECOND
        # After a reload the page shows the same: the old answer folded, Regenerate on the new.
        page.reload()
        expect(page.locator(".message.assistant.previous-version")).to_have_count(1)
        expect(page.locator(".message.assistant").last.get_by_role("button", name="Regenerate")).to_be_visible()
        expect(page.locator("#chat-heading")).to_have_text(HOSTILE_TITLE)
        assert page.evaluate("window.__pwned") is None

        # Search, on the server, over titles and message text.
        search = page.get_by_label("Search your conversations")
        search.fill("CARRIED OVER")
        search.press("Enter")
        expect(page.locator("#search-summary")).to_contain_text("1 conversation with “CARRIED OVER”")
        expect(page.locator("#conversation-list li")).to_have_count(1)
        search = page.get_by_label("Search your conversations")
        search.fill("zanzibar")
        search.press("Enter")
        expect(page.locator("#no-conversations")).to_have_text("None of your conversations has this text.")
        page.get_by_role("link", name="Show all").click()
        expect(page.locator("#conversation-list li")).to_have_count(1)
        screenshot(page, "conversations")

        # Delete: a confirmation dialog (Cancel keeps it), then the open conversation closes.
        page.goto(f"/chat/{conversation.pk}/")
        expect(page.locator("#connection")).to_have_text("Connected")
        page.get_by_role("button", name="Delete").click()
        dialog = page.get_by_role("dialog", name="Delete this conversation?")
        expect(dialog).to_be_visible()
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_be_hidden()
        with account_context(account):
            assert Conversation.objects.for_account(account).exists()
        page.get_by_role("button", name="Delete").click()
        dialog.get_by_role("button", name="Delete conversation").click()
        expect(page.locator("#chat-empty")).to_contain_text("Conversation deleted")
        expect(page.locator("#conversation-list li")).to_have_count(0)
        expect(page.locator("#chat-heading")).to_have_text("Ask your documents")
        expect(page.locator("#conversation-actions")).to_be_hidden()
        assert page.url.endswith("/chat/")
        with account_context(account):
            assert not Conversation.objects.for_account(account).exists()
            assert not Message.objects.for_account(account).exists()
        # The page goes on as a new conversation's.
        stack.model.answer = FIRST
        page.get_by_label("Your question").fill("And after the deletion?")
        page.get_by_label("Your question").press("Enter")
        expect(page.locator(".message.streaming")).to_have_count(0, timeout=30_000)
        expect(page.locator("#conversation-list li")).to_have_count(1)
        expect(page.locator("#chat-status")).not_to_contain_text("Something went wrong")
    finally:
        stack.model.answer = ANSWER
