"""Security headers on every response, a Content-Security-Policy the
dashboard passes (no inline script, event handler or style), and API docs served offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accounts.tests.factories import make_api_key
from config.embedded import BASE_DIR


def _csp(response) -> dict[str, list[str]]:
    header = response.get("Content-Security-Policy", "")
    return {d.split()[0]: d.split()[1:] for d in header.split(";") if d.strip()}


def _assert_common_headers(response):
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    csp = _csp(response)
    assert csp, "no Content-Security-Policy"
    assert csp["default-src"] == ["'self'"]
    assert csp["script-src"] == ["'self'"]
    assert csp["style-src"] == ["'self'"]
    assert csp["object-src"] == ["'none'"] and csp["base-uri"] == ["'none'"]
    assert csp["frame-ancestors"] == ["'none'"] and csp["form-action"] == ["'self'"]
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    assert "'unsafe-eval'" not in response["Content-Security-Policy"]


@pytest.mark.parametrize("path", ["/login/", "/signup/"])
def test_public_pages_carry_the_headers(client, db, path):
    _assert_common_headers(client.get(path))


def test_dashboard_pages_carry_the_headers(client_a):
    for path in ("/", "/documents/", "/chat/", "/credits/", "/team/"):
        response = client_a.get(path)
        assert response.status_code == 200, path
        _assert_common_headers(response)
        # The websocket is same-origin: 'self' covers ws(s) on the same host in CSP3 browsers.
        assert _csp(response)["connect-src"] == ["'self'"]


def test_api_responses_carry_the_headers(client, account_a):
    key = make_api_key(account_a)
    response = client.get("/api/v1/documents/", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200
    _assert_common_headers(response)
    _assert_common_headers(client.get("/api/v1/documents/"))  # the 401 too


TEMPLATES = sorted(p for p in (BASE_DIR / "templates").rglob("*.html"))
INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I), "an inline <script>"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "an inline event handler"),
    (re.compile(r"\sstyle\s*=", re.I), "an inline style attribute"),
    (re.compile(r"<style", re.I), "an inline <style>"),
    (re.compile(r"javascript:", re.I), "a javascript: URL"),
]


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: str(p.relative_to(BASE_DIR / "templates")))
def test_templates_have_nothing_inline_the_policy_would_block(template: Path):
    text = template.read_text()
    for pattern, what in INLINE:
        match = pattern.search(text)
        assert match is None, f"{what} in {template.name}: {text[max(0, match.start() - 60) : match.end() + 60]!r}"


def test_static_js_sets_no_style_attribute():
    for script in (BASE_DIR / "static" / "js").glob("*.js"):
        text = script.read_text()
        assert not re.search(r"""setAttribute\(\s*["']style["']""", text), script.name
        assert not re.search(r"""\bstyle\s*:\s*["']""", text), f"{script.name} passes a style attribute to el()"


# --- API docs, offline ----------------------------------------------------------------------------


def test_api_docs_reference_no_external_host_and_their_assets_are_served(client, db):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "an external asset"
    assert "cdn" not in html.lower() and "@latest" not in html
    assert "<script>" not in html.replace(" ", ""), "an inline script (the CSP would block it)"
    assets = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    assert any(a.endswith(".js") for a in assets)
    for asset in assets:
        served = client.get(asset)
        assert served.status_code == 200, asset
        if hasattr(served, "streaming_content"):
            b"".join(served.streaming_content)
    csp = _csp(response)
    # The library's page keeps a <style> block: inline style only, scripts from this origin.
    assert csp["script-src"] == ["'self'"] and csp["connect-src"] == ["'self'"]
    assert csp["style-src"] == ["'self'", "'unsafe-inline'"]
