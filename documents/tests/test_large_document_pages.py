"""A long document's page shows its chunks 25 at a time, a citation's
`?chunk=N` opens the page holding chunk N with it highlighted, table chunks show as tables
(escaped), the REST detail keeps every chunk; Reindex from the list returns to the list as
it was; the list says what each document was charged."""

from __future__ import annotations

import re

import pytest

from accounts.tests.factories import make_api_key
from billing.services import credits_grant
from core.tenancy import account_context
from documents.views import CHUNKS_PER_PAGE

pytestmark = pytest.mark.django_db


def _big_csv(rows: int = 1500) -> bytes:
    lines = ["Item,Shelf,Note"] + [f"Widget {n:04d},Shelf {n % 40},<b>fragile</b> & boxed" for n in range(rows)]
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def long_document(account_a, fake_llm, upload_and_ingest):
    with account_context(account_a):
        credits_grant(account=account_a, amount=100_000, reason="a long document", key="grant:long-document")
    document = upload_and_ingest(account_a, "inventory.csv", _big_csv(), "text/csv")
    assert document.status == "ready" and document.chunk_count > 2 * CHUNKS_PER_PAGE, document.error
    return document


def _chunk_ids(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<article class="chunk[^"]*" id="chunk-(\d+)"', html)]


def test_chunks_are_paginated(client_a, long_document, django_assert_max_num_queries):
    with django_assert_max_num_queries(25):
        html = client_a.get(f"/documents/{long_document.pk}/").content.decode()
    assert _chunk_ids(html) == list(range(CHUNKS_PER_PAGE))
    pages = -(-long_document.chunk_count // CHUNKS_PER_PAGE)
    assert (
        f"of {pages}</span>" in html
        and 'rel="next"' in html
        and f"({long_document.chunk_count}: #0–#24 on this page)" in html
    )
    second = client_a.get(f"/documents/{long_document.pk}/?page=2").content.decode()
    assert _chunk_ids(second) == list(range(CHUNKS_PER_PAGE, 2 * CHUNKS_PER_PAGE))
    last = client_a.get(f"/documents/{long_document.pk}/?page=9999").content.decode()
    assert _chunk_ids(last)[-1] == long_document.chunk_count - 1


def test_a_citation_opens_the_page_of_its_chunk_highlighted(client_a, long_document):
    cited = CHUNKS_PER_PAGE + 3
    html = client_a.get(f"/documents/{long_document.pk}/?chunk={cited}").content.decode()
    assert cited in _chunk_ids(html) and 0 not in _chunk_ids(html)
    assert f'<article class="chunk highlight" id="chunk-{cited}" tabindex="-1" aria-current="true">' in html
    assert html.count("chunk highlight") == 1 and "Showing the passage a chat answer cited" in html
    gone = client_a.get(f"/documents/{long_document.pk}/?chunk=99999").content.decode()
    assert "no longer in this document" in gone and "chunk highlight" not in gone


@pytest.mark.parametrize(
    "query", ["chunk=abc", "chunk=-4", "chunk=999999999999999999999999", "page=abc", "page=-1", "chunk=&page="]
)
def test_bad_chunk_and_page_values_show_the_first_page(client_a, long_document, query):
    response = client_a.get(f"/documents/{long_document.pk}/?{query}")
    assert response.status_code == 200
    assert _chunk_ids(response.content.decode())[0] in (0, (long_document.chunk_count - 1) // 25 * 25)


def test_table_chunks_show_as_tables_with_escaped_cells(client_a, long_document):
    html = client_a.get(f"/documents/{long_document.pk}/").content.decode()
    assert '<table class="chunk-table stack-sm">' in html
    assert '<th scope="col">Item</th>' in html and '<td data-label="Shelf">Shelf 1</td>' in html
    assert "&lt;b&gt;fragile&lt;/b&gt; &amp; boxed" in html and "<b>fragile</b>" not in html
    assert "| --- |" not in html and "| Item |" not in html


def test_the_rest_detail_still_lists_every_chunk(client, account_a, long_document):
    key = make_api_key(account_a)
    body = client.get(f"/api/v1/documents/{long_document.pk}/", HTTP_AUTHORIZATION=f"Bearer {key}").json()
    assert [c["index"] for c in body["chunks"]] == list(range(long_document.chunk_count))
    assert {"index", "token_count", "preview"} <= set(body["chunks"][0])


def test_another_account_gets_404_for_a_cited_chunk(client, owner_b, long_document):
    client.force_login(owner_b)
    assert client.get(f"/documents/{long_document.pk}/?chunk=30").status_code == 404
    assert client.get(f"/documents/{long_document.pk}/?page=2").status_code == 404


def test_slides_are_labelled_slide_on_the_page(client_a, account_a, fake_llm, upload_and_ingest):
    from documents.tests.office_files import make_pptx

    deck = upload_and_ingest(
        account_a,
        "review.pptx",
        make_pptx(),
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    )
    html = client_a.get(f"/documents/{deck.pk}/?chunk=1").content.decode()
    assert "<span>slide 2</span>" in html and "<span>Warehouse metrics</span>" in html
    assert '<td data-label="Site">Leeds</td>' in html


# --- Knowledge base list ------------------------------------------------------------------


def test_reindex_from_the_list_returns_to_the_list_with_its_filters(
    client_a, account_a, fake_llm, upload_and_ingest, django_capture_on_commit_callbacks
):
    document = upload_and_ingest(account_a, "notes.txt", b"Our office opens at nine.")
    listing = "/documents/?q=notes&status=ready"
    page = client_a.get(listing).content.decode()
    assert f'<input type="hidden" name="next" value="{listing.replace("&", "&amp;")}">' in page
    with django_capture_on_commit_callbacks(execute=True):
        response = client_a.post(f"/documents/{document.pk}/reindex/", {"next": listing})
    assert response.status_code == 302 and response["Location"] == listing
    assert "Reindexing notes.txt." in client_a.get(listing).content.decode()
    # Anywhere else (another site, or not the list) still goes to the document's page.
    for elsewhere in ("https://evil.example/documents/", "//evil.example/documents/", "/credits/"):
        with django_capture_on_commit_callbacks(execute=True):
            response = client_a.post(f"/documents/{document.pk}/reindex/", {"next": elsewhere})
        assert response["Location"] == f"/documents/{document.pk}/", elsewhere


def _row(html: str, document_id: int) -> str:
    row = html[html.index(f'<tr data-document-id="{document_id}">') :]
    return row[: row.index("</tr>")]


def _charged(account, document) -> tuple[int, int]:
    """(tokens, credits) of the document's embedding charge, as the ledger has it."""
    from billing import references
    from billing.models import CreditLedgerEntry

    with account_context(account):
        entry = CreditLedgerEntry.objects.for_account(account).get(
            reference=references.document(document.pk, document.revision), kind="embedding"
        )
    return entry.tokens, -entry.delta


def test_the_list_says_what_was_charged(client_a, account_a, fake_llm, upload_and_ingest):
    document = upload_and_ingest(account_a, "inventory.csv", _big_csv(200), "text/csv")
    html = client_a.get("/documents/").content.decode()
    assert "Tokens embedded · credits charged" in html
    tokens, credits = _charged(account_a, document)
    assert (
        f'<span data-field="embedding_tokens">{tokens:,}</span> '
        f'<span data-field="token_word">tokens</span> · '
        f'<span data-field="credits_charged">{credits:,}</span> '
        f'<span data-field="credit_word">credits</span>'
    ) in _row(html, document.pk)
    assert document.credits_charged == credits > 0


def test_a_docx_row_shows_the_tokens_the_ledger_charged_not_its_texts_own_count(
    client_a, account_a, fake_llm, upload_and_ingest, tmp_path
):
    """A DOCX's row said "350 tokens · 489 credits" while every page says 1 credit = 1 token and
    the ledger said 489 tokens: the row counted its chunks' own text, the charge what was
    embedded (each passage with its title and headings, overlaps counted in each passage)."""
    from documents.tests.files import docx_bytes

    document = upload_and_ingest(
        account_a,
        "report.docx",
        docx_bytes(tmp_path),
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    )
    tokens, credits = _charged(account_a, document)
    assert document.status == "ready" and document.token_count != tokens  # the two counts differ
    row = _row(client_a.get("/documents/").content.decode(), document.pk)
    cell = row.split('data-label="Charged">')[1].split("</td>")[0]
    assert " ".join(re.sub(r"<[^>]+>", "", cell).split()) == f"{tokens:,} tokens · {credits:,} credits"
    assert f"{document.token_count:,} tokens" not in row
    status = client_a.get("/documents/status/").json()["documents"][0]
    assert (status["embedding_tokens"], status["credits_charged"]) == (tokens, credits)
    page = client_a.get(f"/documents/{document.pk}/").content.decode()
    assert f"{tokens:,} tokens embedded" in page and f"{document.token_count:,} tokens of text" in page
