"""The Knowledge base's Retrieval test tab: a form POST that searches as
the search API does (one charge), shows each chunk's ranks, scores, whether it passed and its
text escaped; members and viewers may use it; another account's chunks and a restricted
collection's never appear; bad input is a clear message, never a 500."""

from __future__ import annotations

import re

import pytest

from accounts.models import Role
from accounts.tests.factories import add_member, make_user
from billing.models import AccountBalance, CreditLedgerEntry
from core import tenancy
from core.tenancy import account_context
from documents.models import Chunk, Document
from documents.services import collection_create

URL = "/documents/retrieval-test/"
HOLIDAYS = (
    "Everyone has twenty-eight days of paid holiday a year. Holiday requests go to the team lead "
    "two weeks ahead. <script>window.__pwned=1</script> Unused holiday days carry over until March."
)
KITCHEN = "The kitchen fridge is emptied every Friday afternoon. The espresso machine is descaled monthly."


@pytest.fixture
def library(account_a, fake_llm, upload_and_ingest):
    return {
        "holidays": upload_and_ingest(account_a, "holidays.txt", HOLIDAYS.encode()),
        "kitchen": upload_and_ingest(account_a, "kitchen.txt", KITCHEN.encode()),
    }


def _searches(account) -> int:
    with account_context(account):
        return CreditLedgerEntry.objects.for_account(account).filter(reference="search").count()


def test_the_page_says_what_a_search_costs_before_searching(client, account_a, owner_a, fake_llm):
    client.force_login(owner_a)
    page = client.get(URL)
    assert page.status_code == 200
    html = page.content.decode()
    assert re.search(r'data-testid="search-estimate">\d+</strong>', html)
    assert 'aria-current="page">Retrieval test</a>' in html
    assert client.get("/documents/").content.decode().count('href="/documents/retrieval-test/"') == 1
    assert _searches(account_a) == 0


@pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER])
def test_a_member_or_viewer_sees_ranks_scores_and_the_text_escaped(client, account_a, library, role, settings):
    client.force_login(add_member(account_a, make_user(f"{role}@acme.test"), role=role))
    page = client.post(URL, {"query": "How many paid holiday days?", "top_k": "5"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html and "<script>window.__pwned" not in html
    first = html[html.index('id="retrieval-results"') :]
    assert re.search(
        rf"<strong id=\"hit-passed-1\">#1</strong>\s*<a href=\"/documents/{library['holidays'].pk}/\?chunk=0#chunk-0\"[^>]*>"
        r"holidays.txt</a>",
        first,
    )
    assert re.search(r'data-field="vector">rank 1, similarity 0\.\d{3}', first)
    assert re.search(r'data-field="fulltext">rank 1<', first)
    assert f'data-field="threshold">{settings.RAG_MATCH_THRESHOLD}<' in html
    with account_context(account_a):
        entry = CreditLedgerEntry.objects.for_account(account_a).get(reference="search")
    assert f'data-field="charged">{-entry.delta}<' in html
    assert _searches(account_a) == 1


def test_what_did_not_pass_is_listed_apart(client, account_a, owner_a, library, settings):
    settings.RAG_MATCH_THRESHOLD = 0.99
    client.force_login(owner_a)
    html = client.post(URL, {"query": "holiday requests"}).content.decode()
    passed = html[html.index('id="retrieval-results"') : html.index('id="retrieval-below"')]
    below = html[html.index('id="retrieval-below"') :]
    assert "holidays.txt" in passed and "full text only" in passed
    assert "kitchen.txt" in below and "did not pass" in below and "kitchen.txt" not in passed


def test_another_account_never_sees_a_s_chunks_on_the_page(client, account_a, account_b, library, upload_and_ingest):
    upload_and_ingest(account_b, "notes.txt", b"Beta team notes about the quarterly roadmap.")
    client.force_login(account_b.test_owner)
    html = client.post(URL, {"query": HOLIDAYS, "top_k": "50"}).content.decode()
    found = html[html.index('id="retrieval-results"') :]  # the query box repeats the query
    assert "notes.txt" in found
    assert "holidays.txt" not in found and "twenty-eight" not in found and "kitchen.txt" not in found
    # Asking for A's collection is the same 404 as a missing one, charged nothing.
    with account_context(account_a):
        a_collection = Document.objects.for_account(account_a).get(pk=library["holidays"].pk).collection_id
    page = client.post(URL, {"query": "holiday", "collection": str(a_collection)})
    assert page.status_code == 404 and "twenty-eight" not in page.content.decode()
    assert _searches(account_b) == 1


def test_a_restricted_collection_stays_invisible_to_a_member_without_access(client, account_a, owner_a, library):
    member = add_member(account_a, make_user("member@acme.test"))
    with account_context(account_a, user=owner_a):
        board = collection_create(account=account_a, actor=owner_a, name="Board", restricted=True)
    with tenancy.dangerously_bypass_tenancy(reason="test: file a document under Board"):
        Document.all_accounts.filter(pk=library["kitchen"].pk).update(collection=board)
        Chunk.all_accounts.filter(document_id=library["kitchen"].pk).update(collection=board)
    client.force_login(member)
    html = client.post(URL, {"query": "fridge espresso holiday", "top_k": "50"}).content.decode()
    assert "holidays.txt" in html and "kitchen.txt" not in html and "espresso machine" not in html
    assert ">Board" not in html  # nor offered as a filter
    assert client.post(URL, {"query": KITCHEN, "collection": str(board.pk)}).status_code == 404
    client.force_login(owner_a)
    html = client.post(URL, {"query": "fridge espresso holiday", "collection": str(board.pk)}).content.decode()
    assert "kitchen.txt" in html and "holidays.txt" not in html


@pytest.mark.parametrize(
    "body, message",
    [
        ({"query": "   "}, "Type what to search for."),
        ({"query": "x" * 2001}, "A query is at most 2,000 characters."),
        ({"query": "holiday", "top_k": "many"}, "Results must be a whole number from 1 to 50."),
        ({"query": "holiday", "top_k": "51"}, "less than or equal to 50"),
        ({"query": "holiday", "collection": "abc"}, "no such collection"),
    ],
)
def test_bad_input_is_a_clear_message_and_charges_nothing(client, account_a, owner_a, fake_llm, body, message):
    client.force_login(owner_a)
    page = client.post(URL, body)
    assert page.status_code in (200, 404)
    assert message in page.content.decode()
    assert _searches(account_a) == 0


def test_without_credits_the_page_says_so(client, account_a, owner_a, library):
    with tenancy.dangerously_bypass_tenancy(reason="test: empty the balance"):
        AccountBalance.all_accounts.filter(account=account_a).update(balance=0)
    client.force_login(owner_a)
    page = client.post(URL, {"query": "holiday"})
    assert page.status_code == 402
    assert 'role="alert"' in page.content.decode() and "credits" in page.content.decode().lower()


def test_tags_and_exclude_tags_narrow_the_test_search(client, account_a, owner_a, library):
    from documents.tags import document_tags_set, retrieval_exclude_tags_set

    with account_context(account_a):
        document_tags_set(account=account_a, actor=None, document=library["kitchen"], tags=["Office"])
    client.force_login(owner_a)
    query = {"query": "holiday fridge espresso", "top_k": "50"}
    html = client.post(URL, {**query, "tags": "office"}).content.decode()
    assert "kitchen.txt" in html and "holidays.txt" not in html
    html = client.post(URL, {**query, "exclude_tags": "office"}).content.decode()
    assert "holidays.txt" in html and "kitchen.txt" not in html
    with account_context(account_a):
        retrieval_exclude_tags_set(account=account_a, actor=None, exclude_tags=["office"])
    assert "kitchen.txt" not in client.post(URL, query).content.decode()
    response = client.post(URL, {**query, "tags": "x" * 41})
    assert response.status_code == 400 and "at most 40 characters" in response.content.decode()
