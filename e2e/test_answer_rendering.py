"""Answers and feedback in a real browser: answers render as Markdown through the
vendored markdown-it and DOMPurify (a table, a code block, a list) while HTML from a document
and from the answer stays text; the page says what the search found before the first token;
thumbs down with a comment under an answer reaches the owner's Feedback page."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from playwright.sync_api import expect

from accounts.models import Role
from accounts.tests.factories import add_member, make_account, make_user
from billing.services import credits_grant
from core.tenancy import account_context
from documents.services import document_upload
from e2e.conftest import ANSWER
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

READY_TIMEOUT = 60_000
HOSTILE = '<script>window.__pwned=1;alert(1)</script> <img src=x onerror="window.__pwned=2">'
# A document with a table, a code block and markup that must never run.
DOCUMENT = (
    "# Release checklist\n\nThe release checklist lists each step and who owns it.\n\n"
    "| Step | Owner |\n|---|---|\n| Tag the release | Ada |\n| Publish notes | Bob |\n\n"
    "Run the tagging command:\n\n```sh\ngit tag -s v2.0 -m release\n```\n\n" + HOSTILE + "\n"
)
# The fake model answers from it, quoting the table, the code and the hostile markup.
RENDERED_ANSWER = (
    "The release checklist has two steps [Document 1]:\n\n"
    "| Step | Owner |\n|---|---|\n| Tag the release | Ada |\n| Publish notes | Bob |\n\n"
    "Tag it with:\n\n```sh\ngit tag -s v2.0 -m release\n```\n\n"
    "- Tag first\n- Publish second\n\nThe document also contains " + HOSTILE + " as text."
)

ON_ATTRIBUTES = """() => [...document.querySelectorAll('*')].flatMap(e => [...e.attributes]
    .filter(a => a.name.toLowerCase().startsWith('on')).map(a => e.tagName + '[' + a.name + ']'))"""
# When the sources panel first lists a passage and when the answer first shows text.
WATCH_ORDER = """() => { window.__order = {sources: null, text: null};
  new MutationObserver(() => { if (window.__order.sources === null && document.querySelector('#sources li'))
      window.__order.sources = performance.now(); }).observe(document.getElementById('sources'), {childList: true});
  new MutationObserver(() => { const b = document.querySelector('.message.assistant:last-of-type .bubble');
      if (window.__order.text === null && b && b.textContent.trim()) window.__order.text = performance.now(); })
    .observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true}); }"""


def _team_with_document(name: str, owner_email: str, member_email: str | None = None):
    account = make_account(name, owner_email=owner_email)
    if member_email:
        add_member(account, make_user(member_email), role=Role.MEMBER)
    with account_context(account):
        credits_grant(account=account, amount=50_000, reason="rendering test")
        document_upload(
            account=account,
            actor=None,
            upload=SimpleUploadedFile("release-checklist.md", DOCUMENT.encode(), content_type="text/markdown"),
        )
    return account


def _ask(page, question: str):
    page.goto("/documents/")
    expect(page.locator('[data-field="status"]').first).to_have_text("Ready", timeout=READY_TIMEOUT)
    page.goto("/chat/")
    expect(page.locator("#connection")).to_have_text("Connected")
    page.evaluate(WATCH_ORDER)
    page.get_by_label("Your question").fill(question)
    page.get_by_label("Your question").press("Enter")
    answer = page.locator(".message.assistant").last
    expect(page.locator(".message.streaming")).to_have_count(0, timeout=30_000)
    return answer


def test_tables_and_code_render_and_html_from_a_document_never_runs(new_page, screenshot, stack):
    _team_with_document("Render Team", "owner@render.test")
    dialogs: list[str] = []
    stack.model.answer = RENDERED_ANSWER
    stack.model.backend.chunk_delay = 0.05
    try:
        page = new_page()
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        log_in(page, "owner@render.test")
        answer = _ask(page, "What does the release checklist say?")
        bubble = answer.locator(".bubble")

        # What the search found, said before any answer text: sources first.
        expect(answer.locator(".found-passages")).to_have_text(
            re.compile(r"^Found \d+ passages? in release-checklist\.md$")
        )
        order = page.evaluate("window.__order")
        assert order["sources"] is not None and order["text"] is not None and order["sources"] < order["text"], order

        # Rendered: a table with its header, a code block, a list, a citation link.
        expect(bubble.locator(".table-wrap table th")).to_have_text(["Step", "Owner"])
        expect(bubble.locator("table tbody tr")).to_have_count(2)
        expect(bubble.locator("table tbody tr").first.locator("td")).to_have_text(["Tag the release", "Ada"])
        expect(bubble.locator("pre code")).to_have_text("git tag -s v2.0 -m release\n")
        expect(bubble.locator("ul li")).to_have_text(["Tag first", "Publish second"])
        expect(bubble.locator("a.citation")).to_have_text("Document 1")

        # The hostile markup is shown as text, and nothing of it runs or exists as an element.
        expect(bubble).to_contain_text("<script>window.__pwned=1;alert(1)</script>")
        expect(bubble).to_contain_text('<img src=x onerror="window.__pwned=2">')
        assert bubble.locator("script, img, iframe, style").count() == 0
        assert page.evaluate(ON_ATTRIBUTES) == []
        assert page.evaluate("window.__pwned") is None and dialogs == []
        screenshot(page, "chat-rendered-markdown", full_page=False)

        # The history renders the same on reload, and the document's own page shows the text.
        page.reload()
        stored = page.locator(".message.assistant").last.locator(".bubble")
        expect(stored.locator("table th")).to_have_text(["Step", "Owner"])
        expect(stored.locator("pre code")).to_have_text("git tag -s v2.0 -m release\n")
        assert page.evaluate(ON_ATTRIBUTES) == []
        assert page.evaluate("window.__pwned") is None and dialogs == []
    finally:
        stack.model.answer = ANSWER
        stack.model.backend.chunk_delay = 0.04


def test_small_talk_and_questions_nothing_answers_say_so(new_page, stack):
    make_account("Smalltalk Team", owner_email="owner@smalltalk.test")
    page = new_page()
    log_in(page, "owner@smalltalk.test")
    page.goto("/chat/")
    expect(page.locator("#connection")).to_have_text("Connected")
    page.get_by_label("Your question").fill("hi")
    page.get_by_label("Your question").press("Enter")
    answer = page.locator(".message.assistant").last
    expect(answer.locator(".found-passages")).to_have_text("Small talk: no need to search your documents.")
    expect(page.locator(".message.streaming")).to_have_count(0)

    # Searched, and nothing in the (empty) knowledge base covers it: the line comes from the
    # chat.sources frame (route "general" after a search), whatever the answer then says.
    page.get_by_label("Your question").fill("What is the capital of Australia?")
    page.get_by_label("Your question").press("Enter")
    answer = page.locator(".message.assistant").last
    nothing = "Searched your documents: nothing near enough to answer from."
    expect(answer.locator(".found-passages")).to_have_text(nothing)
    expect(page.locator(".message.streaming")).to_have_count(0, timeout=30_000)
    expect(answer.locator(".found-passages")).to_have_text(nothing)
    # The status line does not say the reply's words a second time.
    expect(answer.locator(".bubble")).not_to_contain_text(nothing)


def test_thumbs_down_with_a_comment_reaches_the_owners_feedback_page(new_page, screenshot, stack):
    _team_with_document("Feedback Team", "owner@feedback.test", member_email="member@feedback.test")
    member = new_page()
    log_in(member, "member@feedback.test")
    expect(member.get_by_role("navigation", name="Main").get_by_role("link", name="Feedback")).to_have_count(0)
    answer = _ask(member, "Who tags the release?")
    answer.get_by_role("button", name="Not helpful").click()
    expect(answer.locator(".feedback-said")).to_have_text("Thanks: saved as “Not helpful”.")
    answer.get_by_label("Comment on this answer (optional)").fill("It should say <b>Ada</b> tags it.")
    answer.get_by_role("button", name="Send comment").click()
    expect(answer.locator(".feedback-said")).to_have_text("Thanks: your comment was saved.")
    # Reopened, the conversation shows the member's own rating and comment.
    member.reload()
    reopened = member.locator(".message.assistant").last
    expect(reopened.get_by_role("button", name="Not helpful")).to_have_attribute("aria-pressed", "true")
    expect(reopened.get_by_label("Comment on this answer (optional)")).to_have_value(
        "It should say <b>Ada</b> tags it."
    )

    owner = new_page()
    log_in(owner, "owner@feedback.test")
    owner.get_by_role("navigation", name="Main").get_by_role("link", name="Feedback").click()
    expect(owner.get_by_role("heading", name="Feedback on answers", level=1)).to_be_visible()
    item = owner.locator(".feedback-item").first
    expect(item).to_have_attribute("data-rating", "down")
    expect(item.locator(".feedback-comment")).to_contain_text("It should say <b>Ada</b> tags it.")
    expect(item.locator(".feedback-question")).to_contain_text("Who tags the release?")
    # The answer rendered as on the chat page (the fake model's default answer: bold, a list).
    expect(item.locator(".answer-text strong")).to_have_text("subject")
    expect(item.locator(".answer-text ul li")).to_have_count(2)
    expect(item).to_contain_text("member@feedback.test")
    assert item.locator("b").count() == 0
    screenshot(owner, "feedback-page")
    # Narrow screens: nothing scrolls sideways, on the Feedback page or under the answer.
    for page, path in ((owner, "/chat/feedback/"), (member, member.url)):
        page.set_viewport_size({"width": 375, "height": 740})
        page.goto(path)
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0, path
