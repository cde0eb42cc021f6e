"""The dashboard works under its Content-Security-Policy.

The browser reports every blocked script, style or connection as a console error ("Refused
to …  because it violates the following Content Security Policy directive") and as a
`securitypolicyviolation` event; the test collects both on each dashboard page while it
uses it (log in, upload, ask over the websocket), and on /api/docs/, which must render
Swagger UI from the app's own files."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from accounts.tests.factories import PASSWORD, make_account

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " + e.sourceFile + ":" + e.lineNumber);
});
"""


def _watched(page) -> list[str]:
    """Console messages about the CSP on `page`, collected as they happen."""
    seen: list[str] = []
    page.on("console", lambda msg: seen.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.add_init_script(RECORD_VIOLATIONS)
    return seen


def _violations(page, console: list[str]) -> list[str]:
    return console + (page.evaluate("window.__cspViolations || []") or [])


def test_dashboard_pages_log_no_csp_violation(new_page, stack, tmp_path):
    make_account("Delta", owner_email="owner@delta.test")
    page = new_page()
    console = _watched(page)
    response = page.goto("/login/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.get_by_label("Email").fill("owner@delta.test")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    assert _violations(page, console) == []

    # Knowledge base: upload through the page's script (drag-and-drop input, progress rows).
    page.goto("/documents/")
    note = tmp_path / "holidays.txt"
    note.write_text("Everyone at Delta has twenty-eight days of paid holiday a year.")
    page.locator("#file-input").set_input_files(str(note))
    expect(page.locator("#upload-progress li")).to_have_count(1)
    row = page.locator("#documents-table tr", has=page.get_by_role("link", name="holidays.txt"))
    expect(row.locator('[data-field="status"]')).to_have_text("Ready", timeout=60_000)
    assert _violations(page, console) == []

    # Chat: the websocket connects (connect-src), an answer streams in.
    page.goto("/chat/")
    expect(page.locator("#connection")).to_have_text("Connected")
    page.get_by_label("Your question").fill("How much holiday do we get?")
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".message.assistant").last.locator(".bubble")).not_to_be_empty()
    expect(page.locator(".message.streaming")).to_have_count(0, timeout=30_000)
    assert _violations(page, console) == []

    for path in ("/", "/credits/", "/team/"):
        page.goto(path)
        expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    assert _violations(page, console) == []

    # The Knowledge base's retrieval test: a form post, results with their scores.
    page.goto("/documents/retrieval-test/")
    page.get_by_label("Query").fill("paid holiday")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#retrieval-results article.hit").first).to_be_visible()
    assert _violations(page, console) == []


def test_api_docs_render_from_the_apps_own_files(new_page, stack):
    page = new_page()
    console = _watched(page)
    external = []
    page.on(
        "request",
        lambda request: (
            external.append(request.url)
            if not request.url.startswith(stack.base_url) and not request.url.startswith("data:")
            else None
        ),
    )
    page.goto("/api/docs/")
    expect(page.locator("#swagger-ui .info .title")).to_contain_text("Groundwork API")
    expect(page.locator("#swagger-ui .opblock").first).to_be_visible()
    assert external == []
    assert _violations(page, console) == []
