"""`POST search/` with `"explain": true` (CONTRACT "Added in the third
wave"): each path's 1-based rank and the vector score per result, null where a path missed,
the threshold, the candidates that did not pass, the same charge as a plain search, strict
booleans, and nothing of another account or of a restricted collection in any of it."""

from __future__ import annotations

import pytest

from accounts.tests.factories import add_member, make_api_key, make_user
from billing.models import CreditLedgerEntry
from core import tenancy
from core.tenancy import account_context
from documents.models import Chunk, Document
from documents.services import collection_create

EXPLAIN_FIELDS = {"rank", "vector_rank", "fulltext_rank", "vector_score", "passed_threshold"}
PLAIN_FIELDS = {"document_id", "document_name", "chunk_index", "pages", "score", "text"}

HOLIDAYS = (
    "Everyone has twenty-eight days of paid holiday a year, and holiday requests go to the team lead "
    "at least two weeks ahead. Unused holiday days carry over until March."
)
LAPTOPS = (
    "New starters receive a laptop with an encrypted disk on their first morning. Laptop repairs are "
    "handled by the hardware desk on the third floor."
)
KITCHEN = (
    "The kitchen fridge is emptied every Friday afternoon. Label your lunch boxes with a name and a "
    "date. The espresso machine is descaled monthly."
)


def _paragraphs(text: str, count: int) -> bytes:
    return "\n\n".join(f"Part {i}. {text}" for i in range(count)).encode()


@pytest.fixture
def library(account_a, fake_llm, upload_and_ingest, settings):
    settings.CHUNK_SIZE, settings.CHUNK_OVERLAP = 200, 0
    return {
        name: upload_and_ingest(account_a, name, _paragraphs(text, 6))
        for name, text in (("holidays.txt", HOLIDAYS), ("laptops.txt", LAPTOPS), ("kitchen.txt", KITCHEN))
    }


@pytest.fixture
def api(client, account_a):
    key = make_api_key(account_a)

    def post(body, key=key):
        return client.post("/api/v1/search/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")

    return post


def _everything(answer) -> list[dict]:
    return answer["results"] + answer["below_threshold"]


def test_explain_gives_each_paths_rank_the_vector_score_and_the_threshold(library, api, settings):
    settings.RAG_MATCH_THRESHOLD = 0.2
    answer = api({"query": "How many paid holiday days do we get?", "top_k": 50, "explain": True})
    assert answer.status_code == 200, answer.content
    answer = answer.json()
    assert answer["threshold"] == 0.2
    assert answer["results"] and all(set(r) == PLAIN_FIELDS | EXPLAIN_FIELDS for r in _everything(answer))
    assert [r["rank"] for r in answer["results"]] == list(range(1, len(answer["results"]) + 1))
    assert answer["results"][0]["document_name"] == "holidays.txt"
    # Every chunk is a vector candidate here: the vector ranks are 1..N, best similarity first.
    found = sorted(_everything(answer), key=lambda r: r["vector_rank"])
    assert [r["vector_rank"] for r in found] == list(range(1, len(found) + 1))
    scores = [r["vector_score"] for r in found]
    assert scores == sorted(scores, reverse=True)
    # Full text finds the holiday chunks only: ranks 1..M among them, null for the others.
    text_ranks = sorted(r["fulltext_rank"] for r in found if r["fulltext_rank"] is not None)
    assert text_ranks == list(range(1, len(text_ranks) + 1))
    assert {r["document_name"] for r in found if r["fulltext_rank"] is not None} == {"holidays.txt"}
    assert any(r["fulltext_rank"] is None for r in found)
    for r in answer["results"]:
        assert r["passed_threshold"] == (r["vector_score"] >= 0.2)
        assert r["passed_threshold"] or r["fulltext_rank"] is not None
    # What did not pass: under the threshold and not found by full text, scored nothing.
    assert answer["below_threshold"]
    for r in answer["below_threshold"]:
        assert r["rank"] is None and r["score"] == 0 and r["fulltext_rank"] is None
        assert r["vector_score"] < 0.2 and r["passed_threshold"] is False


def test_a_chunk_only_full_text_found_has_no_vector_rank_or_score(
    account_a, fake_llm, upload_and_ingest, api, settings
):
    """More than the vector path's 40 candidates are closer to the query than the one chunk
    with the word (the fake embedding counts shared trigrams: "zanzibarish" is near
    "zanzibar", a long chunk that says it once is far): full text finds it, vector does not."""
    settings.CHUNK_SIZE, settings.CHUNK_OVERLAP = 40, 0
    upload_and_ingest(account_a, "near.txt", _paragraphs("Zanzibarish zanzibari zanzibarian.", 80))
    upload_and_ingest(
        account_a,
        "far.txt",
        (b"Printers, keys, parking badges, lockers, desks, chairs, plants, lamps and the office in Zanzibar."),
    )
    answer = api({"query": "zanzibar", "top_k": 3, "explain": True}).json()
    far = [r for r in answer["results"] if r["document_name"] == "far.txt"]
    assert far, answer["results"]
    assert far[0]["vector_rank"] is None and far[0]["vector_score"] is None
    assert far[0]["fulltext_rank"] == 1 and far[0]["passed_threshold"] is False
    near = [r for r in answer["results"] if r["document_name"] == "near.txt"]
    assert near and all(r["fulltext_rank"] is None and r["vector_rank"] >= 1 for r in near)


def test_without_explain_the_answer_is_as_before(library, api):
    for body in ({"query": "holiday days"}, {"query": "holiday days", "explain": False}):
        answer = api(body).json()
        assert set(answer) == {"results"}
        assert answer["results"] and all(set(r) == PLAIN_FIELDS for r in answer["results"])


def test_explain_is_charged_exactly_as_a_search(library, api, account_a):
    plain = api({"query": "Who repairs my laptop?"})
    explained = api({"query": "Who repairs my laptop?", "explain": True}).json()
    assert plain.status_code == 200
    with account_context(account_a):
        entries = list(CreditLedgerEntry.objects.for_account(account_a).filter(reference="search").order_by("pk"))
    assert len(entries) == 2 and entries[0].delta == entries[1].delta and entries[0].tokens == entries[1].tokens
    assert explained["charged"] == {
        "tokens": entries[1].tokens,
        "credits": -entries[1].delta,
        "model": entries[1].model,
    }
    # The same hits, in the same order, with or without explain.
    assert [(r["document_id"], r["chunk_index"], r["score"]) for r in plain.json()["results"]] == [
        (r["document_id"], r["chunk_index"], r["score"]) for r in explained["results"]
    ]


@pytest.mark.parametrize("flag", ["true", "yes", 1, 0, "false", None, [], {"on": True}])
def test_explain_must_be_a_json_boolean(api, fake_llm, account_a, flag):
    response = api({"query": "holiday", "explain": flag})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid" and "explain" in error["message"] and "boolean" in error["message"]
    with account_context(account_a):
        assert not CreditLedgerEntry.objects.for_account(account_a).filter(reference="search").exists()


def test_another_account_never_sees_a_s_chunks_through_explain(library, client, account_b, upload_and_ingest):
    upload_and_ingest(account_b, "notes.txt", b"Beta team notes about the quarterly roadmap.\n" * 5)
    answer = client.post(
        "/api/v1/search/",
        {"query": HOLIDAYS, "top_k": 50, "explain": True},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {make_api_key(account_b)}",
    ).json()
    assert {r["document_name"] for r in _everything(answer)} == {"notes.txt"}
    assert not {r["document_id"] for r in _everything(answer)} & {d.pk for d in library.values()}


def test_a_restricted_collection_stays_invisible_through_explain(library, client, account_a, owner_a):
    member = add_member(account_a, make_user("member@acme.test"))
    with account_context(account_a, user=owner_a):
        board = collection_create(account=account_a, actor=owner_a, name="Board", restricted=True)
    secret = library["kitchen.txt"]
    with tenancy.dangerously_bypass_tenancy(reason="test: file a document under Board"):
        Document.all_accounts.filter(pk=secret.pk).update(collection=board)
        Chunk.all_accounts.filter(document_id=secret.pk).update(collection=board)
    client.force_login(member)
    body = {"query": KITCHEN, "top_k": 50, "explain": True}
    answer = client.post("/api/v1/search/", body, content_type="application/json").json()
    names = {r["document_name"] for r in _everything(answer)}
    assert names == {"holidays.txt", "laptops.txt"}
    client.force_login(owner_a)
    answer = client.post("/api/v1/search/", body, content_type="application/json").json()
    assert answer["results"][0]["document_name"] == "kitchen.txt"


def test_explain_costs_no_extra_query(library, api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    api({"query": "warm up"})  # a key's first use writes its last-used time
    for explain in (False, True):
        with CaptureQueriesContext(connection) as queries:
            assert api({"query": "holiday requests", "explain": explain}).status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts
