"""The dashboard in a real browser against the real stack (daphne + rq worker + fake model):
sign up → upload a PDF and a DOCX → both become Ready live → ask → a streamed answer with a
clickable citation → the credits page shows both debits; team roles; tenancy; 375 px."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from playwright.sync_api import expect

from accounts.tests.factories import make_account
from billing.selectors import balance_get
from billing.services import credits_debit, credits_grant
from chat.models import Conversation, Message
from core.tenancy import account_context
from documents.services import document_upload
from documents.tests.files import make_docx, make_pdf, prose_page
from e2e.conftest import ANSWER
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

READY_TIMEOUT = 60_000


def _emailed_link(stack, to: str, path: str) -> str:
    """The last `path` link emailed to `to`, from daphne's console email backend."""
    for _ in range(50):
        text = stack.logs["daphne"].read_text(errors="replace")
        messages = [m for m in text.split("Content-Type: text/plain") if f"To: {to}" in m]
        links = [
            link for m in messages for link in re.findall(rf"http://127\.0\.0\.1:\d+({re.escape(path)}[^\s/]+/)", m)
        ]
        if links:
            return links[-1]
        time.sleep(0.1)
    pytest.fail(f"no email to {to} with a {path} link:\n{stack.output()}")


def _nav(page, name: str):
    return page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True)


def _no_horizontal_scroll(page) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    if overflow > 0:
        culprits = page.evaluate("""() => [...document.querySelectorAll('body *')]
            .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('.table-wrap'))
            .slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id)""")
        pytest.fail(f"{page.url} scrolls sideways by {overflow}px at {page.viewport_size['width']}px: {culprits}")


def test_sign_up_upload_chat_and_pay(new_page, screenshot, stack, tmp_path):
    page = new_page()
    page.goto("/login/")
    screenshot(page, "login")

    # Sign up: lands on the overview, with the starting balance in the header.
    page.get_by_role("link", name="Create an account").click()
    page.get_by_label("Your name").fill("Ada Owner")
    page.get_by_label("Work email").fill("ada@acme.test")
    page.get_by_label("Password").fill("Upload-and-ask-42")
    page.get_by_label("Team name").fill("Acme Research")
    page.get_by_role("button", name="Sign up").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme Research")
    expect(page.get_by_text("Get started in two steps")).to_be_visible()
    # The team works at once, but its starting credits wait for the emailed verification link.
    expect(page.get_by_role("heading", name="Verify your email to receive your starting credits")).to_be_visible()
    expect(page.locator("#header-balance [data-balance]")).to_have_text("0")
    page.goto(_emailed_link(stack, "ada@acme.test", "/verify-email/"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme Research")
    expect(page.get_by_text("ada@acme.test is verified")).to_be_visible()
    expect(page.locator("#verify-email-banner")).to_have_count(0)
    balance_before = int(page.locator("#header-balance [data-balance]").inner_text().replace(",", ""))
    assert balance_before == settings.SIGNUP_CREDITS

    # Knowledge base: empty state, then two files through the file input (the drop zone's input).
    _nav(page, "Knowledge base").click()
    expect(page.get_by_text("No documents yet")).to_be_visible()
    page.evaluate("window.__notReloaded = true")
    pdf = make_pdf([prose_page(1), prose_page(2), prose_page(3)], title="Field Guide")
    docx = Path(make_docx(tmp_path)).read_bytes()
    page.locator("#file-input").set_input_files(
        [
            {"name": "field-guide.pdf", "mimeType": "application/pdf", "buffer": pdf},
            {
                "name": "report.docx",
                "buffer": docx,
                "mimeType": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            },
        ]
    )
    uploads = page.locator("#upload-progress li")
    expect(uploads).to_have_count(2)
    for name in ("field-guide.pdf", "report.docx"):
        row = page.locator("#documents-table tr", has=page.get_by_role("link", name=name))
        expect(row.locator('[data-field="status"]')).to_have_text("Ready", timeout=READY_TIMEOUT)
        expect(row.locator('[data-field="chunk_count"]')).not_to_have_text("0")
    assert page.evaluate("window.__notReloaded === true"), "the page reloaded instead of updating live"
    screenshot(page, "knowledge_base")

    # The document page: metadata, chunks with page numbers, the credits it cost.
    page.get_by_role("link", name="field-guide.pdf").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("field-guide.pdf")
    expect(page.locator("#chunk-0 header")).to_contain_text("page 1")
    assert int(page.locator("#document-credits strong").inner_text()) > 0

    # Chat: the answer streams in, then its citations open the cited chunk.
    _nav(page, "Chat").click()
    expect(page.get_by_role("heading", name="Ask a first question")).to_be_visible()
    expect(page.locator("#connection")).to_have_text("Connected")
    question = page.get_by_label("Your question")
    question.fill("What do our documents say about subject1 and revenue?")
    question.press("Enter")
    streaming = page.locator(".message.assistant.streaming")
    expect(streaming.locator(".bubble")).to_contain_text("Each page")
    # Read class and text in one go: the stream may end at any moment.
    still_streaming, partial = page.evaluate("""() => {
        const a = [...document.querySelectorAll('.message.assistant')].pop();
        return [a.classList.contains('streaming'), a.querySelector('.bubble').textContent]; }""")
    assert still_streaming and "March" not in partial, "the answer did not arrive in pieces"
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    expect(page.get_by_role("button", name="Send")).to_be_hidden()
    answer = page.locator(".message.assistant").last
    expect(answer.locator(".bubble")).to_contain_text("carry over until March", timeout=20_000)
    expect(streaming).to_have_count(0)
    expect(answer.locator("strong")).to_have_text("subject")  # Markdown rendered...
    expect(answer.locator(".bubble li")).to_have_count(2)
    expect(answer.locator("code")).to_have_text("groundwork")
    expect(page.get_by_role("button", name="Send")).to_be_visible()
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    expect(page.locator("#sources li").first).to_be_visible()
    assert re.search(r"/chat/\d+/$", page.url), "the new conversation has its own address"
    expect(page.locator("#conversation-list a[aria-current=page]")).to_contain_text("subject1")
    citation = answer.locator("a.citation").first
    expect(citation).to_have_text("Document 1")
    balance_after_chat = int(page.locator("#header-balance [data-balance]").inner_text().replace(",", ""))
    assert balance_after_chat < balance_before
    screenshot(page, "chat")

    href = citation.get_attribute("href")
    assert re.fullmatch(r"/documents/\d+/\?chunk=\d+#chunk-\d+", href), href
    citation.click()
    highlighted = page.locator(".chunk.highlight")
    expect(highlighted).to_be_visible()
    assert highlighted.get_attribute("id") == href.rsplit("#", 1)[1]
    screenshot(page, "document")

    # History survives a reload, rendered by the server and formatted by the page.
    page.go_back()
    page.reload()
    expect(page.locator(".message.assistant a.citation").first).to_have_text("Document 1")

    # Credits: the embedding and chat debits, in the ledger and the chart.
    page.locator("#header-balance").click()
    expect(page.get_by_role("heading", name="Credits", level=1)).to_be_visible()
    # Embedding: the two documents, and the question (embedded to search the passages).
    expect(page.locator('#ledger-table tr[data-kind="embedding"]')).to_have_count(3)
    expect(page.locator('#ledger-table tr[data-kind="chat"]')).to_have_count(1)
    expect(page.locator("#usage-chart rect.bar-embedding")).to_have_count(1)
    expect(page.locator("#usage-chart rect.bar-chat")).to_have_count(1)
    assert int(page.locator("#credits-balance").inner_text().replace(",", "")) == balance_after_chat
    screenshot(page, "credits")

    # Team: invite a member and create an API key, shown once.
    _nav(page, "Team").click()
    page.get_by_label("Email address").fill("bob@acme.test")
    page.get_by_role("button", name="Invite").click()
    expect(page.get_by_text("Invited bob@acme.test.")).to_be_visible()
    page.get_by_label("Key name").fill("Zapier")
    page.get_by_role("button", name="Create key").click()
    expect(page.locator("#new-api-key")).to_contain_text("gw_")
    screenshot(page, "team")
    page.reload()
    expect(page.locator("#new-api-key")).to_have_count(0)

    # The invited member signs up: that alone joins nothing. The emailed invitation link, then
    # Accept, lands them in Acme Research, where they cannot manage the team.
    member = new_page()
    member.goto("/signup/")
    member.get_by_label("Work email").fill("bob@acme.test")
    member.get_by_label("Password").fill("Member-pass-42")
    member.get_by_role("button", name="Sign up").click()
    expect(member.get_by_role("heading", level=1)).not_to_have_text("Acme Research")
    expect(member.get_by_label("Account")).to_have_count(0)  # one team: their own
    member.goto(_emailed_link(stack, "bob@acme.test", "/invitations/"))
    expect(member.get_by_role("heading", level=1)).to_have_text("Join Acme Research")
    member.get_by_role("button", name="Accept and join Acme Research").click()
    expect(member.get_by_role("heading", level=1)).to_have_text("Acme Research")
    expect(member.get_by_text("You joined Acme Research as member.")).to_be_visible()
    expect(member.get_by_role("navigation", name="Main").get_by_role("link", name="Team")).to_have_count(0)
    expect(member.get_by_role("navigation", name="Main").get_by_role("link", name="Knowledge base")).to_be_visible()
    response = member.goto("/team/")
    assert response.status == 403
    expect(member.get_by_role("heading", level=1)).to_have_text("Only owners and admins can manage the team")
    screenshot(member, "team_forbidden_for_member")


def test_another_accounts_document_is_a_404_page(new_page, stack):
    account_a = make_account("Alpha", owner_email="owner@alpha.test")
    make_account("Bravo", owner_email="owner@bravo.test")
    with account_context(account_a):
        document, _ = document_upload(
            account=account_a,
            actor=None,
            upload=SimpleUploadedFile("alpha-secrets.txt", b"Alpha's plans for next year.", content_type="text/plain"),
        )
    page = new_page()
    log_in(page, "owner@bravo.test")
    response = page.goto(f"/documents/{document.pk}/")
    assert response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    expect(page.get_by_text("alpha-secrets")).to_have_count(0)
    page.goto("/documents/")
    expect(page.get_by_text("alpha-secrets")).to_have_count(0)


def test_model_text_is_escaped_and_errors_are_explained(new_page, stack):
    account = make_account("Gamma", owner_email="owner@gamma.test")
    page = new_page()
    log_in(page, "owner@gamma.test")
    stack.model.answer = (
        '<img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> '
        "[click](javascript:alert(1)) [ok](https://example.com/a) [Document 7] "
        "[refund portal](https://evil.test/refunds?u=1)"
    )
    try:
        page.goto("/chat/")
        expect(page.get_by_role("heading", name="Add documents first")).to_be_visible()
        expect(page.locator("#connection")).to_have_text("Connected")
        page.get_by_label("Your question").fill("What is a knowledge base?")
        page.get_by_role("button", name="Send").click()
        answer = page.locator(".message.assistant").last
        expect(answer.locator(".bubble")).to_contain_text("<script>window.__pwned=2</script>")
        expect(page.locator(".message.streaming")).to_have_count(0)
        assert page.evaluate("window.__pwned") is None
        assert answer.locator("img, script").count() == 0
        expect(answer.get_by_role("link", name="ok")).to_have_attribute("href", "https://example.com/a")
        # A link a document planted names the host it leads to, and opens apart from the app.
        planted = answer.get_by_role("link", name="refund portal")
        expect(planted).to_have_attribute("href", "https://evil.test/refunds?u=1")
        expect(planted).to_contain_text("evil.test")
        expect(planted).to_have_attribute("rel", re.compile(r"\bnoopener\b.*\bnoreferrer\b"))
        expect(planted).to_have_attribute("title", "https://evil.test/refunds?u=1")
        expect(answer.get_by_role("link", name="click")).to_have_count(0)  # javascript: stays text
        expect(answer.locator(".bubble")).to_contain_text("[Document 7]")  # no such source: not a link

        # Stop: a slow answer is cut short, kept, and marked as stopped.
        stack.model.answer = " ".join(f"word{i}" for i in range(200))
        stack.model.backend.chunk_delay = 0.2
        page.get_by_label("Your question").fill("What is a vector?")
        page.get_by_label("Your question").press("Enter")
        # Stop once the answer is under way (its text may be held back while it is checked).
        expect(page.locator(".message.streaming .turn-state")).to_have_text(re.compile("Writing…|Thinking…"))
        page.get_by_role("button", name="Stop").click()
        stopped = page.locator(".message.assistant").last
        expect(stopped.locator(".turn-state")).to_have_text("Stopped", timeout=10_000)
        assert "word199" not in stopped.inner_text()
        stack.model.backend.chunk_delay = 0.04

        # The model is down (primary and fallback): a clear state with a retry, nothing stuck,
        # and the question stays in the thread (also after a reload); Retry answers it below
        # that one copy of it.
        for model in {settings.CHAT_MODEL, settings.CHAT_FALLBACK_MODEL}:
            stack.model.fail(model, 503)
        page.get_by_label("Your question").fill("And what is an index?")
        page.get_by_label("Your question").press("Enter")
        expect(page.get_by_text("The model is unavailable right now")).to_be_visible(timeout=20_000)
        expect(page.locator("#chat-status").get_by_role("button", name="Retry")).to_be_visible()
        expect(page.get_by_role("button", name="Send")).to_be_visible()
        question = page.locator(".message.user", has_text="And what is an index?")
        expect(question).to_have_count(1)
        expect(page.locator(".message.assistant.unanswered").get_by_role("button", name="Retry")).to_be_visible()
        page.reload()
        expect(page.locator("#connection")).to_have_text("Connected")
        expect(question).to_have_count(1)
        expect(page.locator("#unanswered")).to_contain_text("Your question is kept")
        stack.model.recover()
        stack.model.answer = "An index is a list that finds things fast."
        page.locator("#unanswered").get_by_role("button", name="Retry").click()
        answered = page.locator(".message.assistant").last
        expect(answered.locator(".bubble")).to_contain_text("finds things fast", timeout=20_000)
        expect(page.locator(".message.streaming")).to_have_count(0)
        expect(question).to_have_count(1)
        page.reload()
        expect(question).to_have_count(1)
        expect(page.locator("#unanswered")).to_have_count(0)

        # No credits left: the page says so and points to the credits page.
        with account_context(account):
            credits_debit(account=account, tokens=balance_get(account=account), key="drain", kind="chat")
        page.get_by_label("Your question").fill("Tell me about our plans")
        page.get_by_label("Your question").press("Enter")
        expect(page.get_by_text("Not enough credits")).to_be_visible()
        expect(page.get_by_role("link", name="See credits")).to_have_attribute("href", "/credits/")
        expect(page.get_by_label("Your question")).to_have_value("Tell me about our plans")
    finally:
        stack.model.recover()
        stack.model.answer = ANSWER
        stack.model.backend.chunk_delay = 0.04


def test_main_pages_fit_a_375px_screen(new_page, screenshot, stack):
    account = make_account("Delta Narrow Team", owner_email="owner@delta.test")
    with account_context(account):
        credits_grant(account=account, amount=5000, reason="narrow screen test")
        document, _ = document_upload(
            account=account,
            actor=None,
            upload=SimpleUploadedFile(
                "a-rather-long-document-name-for-a-small-screen.txt",
                ("Line of text. " * 200).encode(),
                content_type="text/plain",
            ),
        )
    page = new_page(width=375, height=740)
    page.goto("/login/")
    _no_horizontal_scroll(page)
    log_in(page, "owner@delta.test")
    for path in (
        "/",
        "/documents/",
        f"/documents/{document.pk}/",
        "/chat/",
        "/credits/",
        "/team/",
        "/documents/sources/",
    ):
        assert page.goto(path).ok, path  # the page itself, not a 404 page that also fits
        expect(page.locator("main h1").first).to_be_visible()
        _no_horizontal_scroll(page)
    page.goto("/documents/")
    expect(page.locator('[data-field="status"]').first).to_have_text("Ready", timeout=READY_TIMEOUT)
    screenshot(page, "knowledge_base_375px")
    page.goto("/chat/")
    page.get_by_label("Your question").fill("What does our document say about text?")
    page.get_by_label("Your question").press("Enter")
    expect(page.locator(".message.assistant a.citation").first).to_be_visible(timeout=20_000)
    expect(page.locator(".message.streaming")).to_have_count(0)
    _no_horizontal_scroll(page)
    screenshot(page, "chat_375px")


# Cites the first passage only, with a code line far wider than a phone.
CITES_ONE = (
    "Unused holiday carries over until March [Document 1].\n\n```python\nrule = '"
    + "carry-over-" * 40
    + "'\n```\n\nThat is all the handbook says."
)
LONG_NAME = "holiday-handbook-" * 6 + "final.txt"


def _record_turn_states(page) -> None:
    """Every text the live region (#turn-state) announces, in order, in window.__states."""
    page.evaluate("""() => { window.__states = [];
        new MutationObserver(records => records.forEach(r => r.addedNodes.forEach(n => window.__states.push(n.textContent))))
          .observe(document.getElementById('turn-state'), {childList: true}); }""")


def _cited_and_retrieved(answer) -> None:
    sources = answer.locator(".answer-sources")
    expect(sources.locator(".sources-label")).to_have_text("Cited")
    cited = sources.locator(".cited-sources li")
    expect(cited).to_have_count(1)
    expect(cited.locator(".n")).to_have_text("[1]")
    expect(cited.locator("a")).to_have_attribute("href", re.compile(r"^/documents/\d+/\?chunk=\d+#chunk-\d+$"))
    also = sources.locator("details.also-retrieved")
    expect(also.locator("summary")).to_have_text(re.compile(r"^Also retrieved \(\d+\)$"))
    expect(also.locator("li").first).to_be_hidden()  # collapsed until asked for
    assert also.locator("li[data-n='1']").count() == 0, "a cited source is listed again as merely retrieved"


def _stored_conversation(account):
    """A conversation as the history stores it: a long title, an answer with a long code line
    citing a passage with a long document name, and a passage it did not cite."""
    with account_context(account):
        live = Message.objects.for_account(account).filter(role="assistant").exclude(sources=[]).first()
        sources = live.sources
        conversation = Conversation.objects.for_account(account).create(
            account=account, user=account.test_owner, title="A conversation about " + "holiday carry-over " * 8
        )
        Message.objects.for_account(account).create(
            account=account,
            conversation=conversation,
            role="user",
            content="How does holiday carry over?",
            sources=sources,
        )
        Message.objects.for_account(account).create(
            account=account,
            conversation=conversation,
            role="assistant",
            content=CITES_ONE,
            sources=sources,
            citations=[{k: sources[0][k] for k in ("n", "document_id", "document_name", "chunk_index", "pages")}],
        )
    return conversation


def _truncated_with_title(locator) -> None:
    """One line ending in an ellipsis, the full text in the title attribute."""
    cut, whole = locator.evaluate("""e => [e.scrollWidth > e.clientWidth,
        e.closest('[title]') !== null && e.closest('[title]').title.trim() === e.textContent.trim()]""")
    assert cut and whole, f"{locator}: cut={cut} full title={whole}"


def test_answer_states_cited_apart_from_retrieved_and_375px(new_page, screenshot, stack):
    account = make_account("Echo Team", owner_email="owner@echo.test")
    with account_context(account):
        credits_grant(account=account, amount=20000, reason="cited sources test")
        for name, text in (
            (LONG_NAME, "Holiday policy. Unused holiday carries over until March. " * 3),
            ("laptops.txt", "Holiday laptops: new starters get a laptop on day one. " * 3),
            ("badges.txt", "Holiday badges: every starter receives a badge for the office. " * 3),
        ):
            document_upload(
                account=account, actor=None, upload=SimpleUploadedFile(name, text.encode(), content_type="text/plain")
            )
    page = new_page()
    log_in(page, "owner@echo.test")
    page.goto("/documents/")
    for status in page.locator('[data-field="status"]').all():
        expect(status).to_have_text("Ready", timeout=READY_TIMEOUT)

    stack.model.answer = CITES_ONE
    stack.model.backend.chunk_delay = 0.15
    try:
        page.goto("/chat/")
        expect(page.locator("#connection")).to_have_text("Connected")
        _record_turn_states(page)
        question = (
            "What do our documents say about holiday, and about carrying unused holiday days over into the next year?"
        )
        page.get_by_label("Your question").fill(question)
        page.get_by_label("Your question").press("Enter")
        answer = page.locator(".message.assistant").last
        expect(answer.locator(".turn-state")).to_have_text("Writing…")
        expect(page.locator(".message.streaming")).to_have_count(0, timeout=30_000)
        expect(answer.locator(".bubble pre")).to_be_visible()
        expect(answer.locator(".turn-state")).to_have_count(0)  # a finished answer needs no state
        states = page.evaluate("window.__states")
        # Searching, then what the search found and "Writing the answer…" until the first token.
        assert states[0] == "Searching your documents…", states
        assert re.fullmatch(r"Found \d+ passages? in .+\. Writing the answer…", states[1]), states
        assert "holiday-handbook-" in states[1] and states[2] == "Writing…", states
        _cited_and_retrieved(answer)
        answer.locator("details.also-retrieved summary").click()
        expect(answer.locator("details.also-retrieved li").first).to_be_visible()
        expect(answer.locator("a.citation")).to_have_text("Document 1")
        screenshot(page, "chat-cited-sources-live", full_page=False)

        # Reloaded, the server-rendered conversation shows the same.
        page.reload()
        _cited_and_retrieved(page.locator(".message.assistant").last)

        # 375 px: nothing cut or scrolling sideways; code scrolls in its box; titles end in "…".
        # A stored conversation, so the layout is checked whatever the answer pipeline keeps of
        # a model's code block.
        conversation = _stored_conversation(account)
        page.goto(f"/chat/{conversation.pk}/")
        page.locator(".message.assistant details.also-retrieved summary").click()
        expect(page.locator(".message.assistant pre")).to_contain_text("carry-over-carry-over")
        screenshot(page, "chat-cited-sources", full_page=False)  # the one in docs/screenshots
        narrow = new_page(width=375, height=740)
        log_in(narrow, "owner@echo.test")
        narrow.goto(f"/chat/{conversation.pk}/")
        expect(narrow.locator(".message.assistant pre")).to_be_visible()
        _no_horizontal_scroll(narrow)
        assert narrow.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        pre_scrolls, pre_right = narrow.locator(".message.assistant pre").evaluate(
            "e => [e.scrollWidth > e.clientWidth, e.getBoundingClientRect().right]"
        )
        assert pre_scrolls and pre_right <= 375, (pre_scrolls, pre_right)
        _truncated_with_title(narrow.locator("#chat-heading"))
        _truncated_with_title(narrow.locator("#conversation-list .title").first)
        narrow.locator(".message.assistant details.also-retrieved summary").first.click()
        _truncated_with_title(narrow.locator(".answer-sources .source-name", has_text="holiday-handbook").first)
        _no_horizontal_scroll(narrow)
        # A live answer at 375 px fits too.
        narrow.get_by_label("Your question").fill("And what do our documents say about holiday badges?")
        narrow.get_by_label("Your question").press("Enter")
        expect(narrow.locator(".message.assistant")).to_have_count(2)
        expect(narrow.locator(".message.streaming")).to_have_count(0, timeout=30_000)
        _no_horizontal_scroll(narrow)
        screenshot(narrow, "chat-cited-sources-375px")
    finally:
        stack.model.answer = ANSWER
        stack.model.backend.chunk_delay = 0.04
