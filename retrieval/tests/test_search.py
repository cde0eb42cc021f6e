"""Hybrid search over documents ingested through the real pipeline (upload → queue →
chunks → fake-provider embeddings), in PostgreSQL with RLS on: ranking in each mode, the
threshold, top_k, full-text-only hits, deleted documents, passages, the debit, the API and
tenant isolation, including a small account inside a larger table."""

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.urls import include, path

from accounts.tests.factories import make_api_key
from billing.errors import InsufficientCredits
from billing.models import CreditLedgerEntry
from billing.selectors import balance_get
from core.tenancy import UnscopedQueryError, account_context, dangerously_bypass_tenancy
from documents.models import Chunk, Document, Status
from documents.services import collection_default_ensure
from llm.fake_server import fake_embedding
from retrieval.api import SearchView
from retrieval.search import (
    ensure_tenant_vector_index,
    expand_passages,
    first_chunks,
    hybrid_search,
    merge_overlap,
    query_embed,
    query_search,
    search_for_query,
    search_path_for,
    tenant_index_name,
    tenant_vector_index_drop,
)

# The URL is added to documents/api_urls.py; this module mounts it too so the tests do not
# depend on that line.
urlpatterns = [path("api/v1/search/", SearchView.as_view()), path("", include("config.urls"))]

SENTENCES = {
    "holidays.txt": (
        "Everyone has twenty-eight days of paid holiday a year, and holiday requests go to "
        "the team lead at least two weeks ahead. Unused holiday days carry over until March. "
    ),
    "laptops.txt": (
        "New starters receive a laptop with an encrypted disk on their first morning. Laptop "
        "repairs are handled by the hardware desk on the third floor. "
    ),
    "kitchen.txt": (
        "The kitchen fridge is emptied every Friday afternoon. Label your lunch boxes with "
        "a name and a date. The espresso machine is descaled monthly. "
    ),
}


def _text(name: str, repeat: int = 14) -> bytes:
    paragraphs = [f"Section {i}. " + SENTENCES[name] * 2 for i in range(repeat // 2)]
    return "\n\n".join(paragraphs).encode()


@pytest.fixture
def ingest(fake_llm, run_jobs, django_capture_on_commit_callbacks):
    def go(account, name, data, content_type="text/plain"):
        with account_context(account), django_capture_on_commit_callbacks(execute=True):
            from documents.services import document_upload

            document, _ = document_upload(
                account=account, actor=None, upload=SimpleUploadedFile(name, data, content_type=content_type)
            )
        run_jobs()
        with account_context(account):
            document = Document.objects.for_account(account).get(pk=document.pk)
        assert document.status == Status.READY, document.error
        return document

    return go


@pytest.fixture
def library(account_a, ingest):
    """Three documents of account A, each several chunks long."""
    return {name: ingest(account_a, name, _text(name)) for name in SENTENCES}


def _search(account, query, **kwargs):
    with account_context(account):
        return hybrid_search(account=account, query=query, query_vector=fake_embedding(query), **kwargs)


def _chunks(account, document):
    with account_context(account):
        return list(Chunk.objects.for_account(account).filter(document=document).order_by("chunk_index"))


# --- ranking ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["vector", "fulltext", "hybrid"])
@pytest.mark.parametrize(
    "query, expected",
    [
        ("How many paid holiday days do we get?", "holidays.txt"),
        ("Who repairs my laptop?", "laptops.txt"),
        ("When is the fridge emptied?", "kitchen.txt"),
    ],
)
def test_a_query_sharing_words_with_a_document_ranks_it_first(library, account_a, mode, query, expected):
    hits = _search(account_a, query, mode=mode)
    assert hits, mode
    assert hits[0].document_name == expected
    assert hits == sorted(hits, key=lambda h: -h.score)
    if mode == "fulltext":
        assert all(h.similarity is None for h in hits)
    if mode == "vector":
        assert all(h.similarity is not None and h.similarity >= 0.1 for h in hits)


def test_hits_carry_the_chunk_and_its_document(library, account_a):
    hit = _search(account_a, "espresso machine descaled", top_k=1)[0]
    with account_context(account_a):
        stored = Chunk.objects.for_account(account_a).get(pk=hit.chunk_id)
    assert (hit.document_id, hit.chunk_index, hit.text) == (stored.document_id, stored.chunk_index, stored.content)
    assert hit.document_name == "kitchen.txt" and hit.page_start is None and hit.page_end is None
    assert 0 < hit.similarity <= 1 and hit.score > 0


def test_top_k_defaults_to_the_setting_and_is_respected(library, account_a, settings):
    settings.RAG_TOP_K = 3
    assert len(_search(account_a, "holiday laptop fridge")) == 3
    assert len(_search(account_a, "holiday laptop fridge", top_k=7)) == 7
    assert len(_search(account_a, "holiday laptop fridge", top_k=50)) == sum(d.chunk_count for d in library.values())


def test_threshold_drops_weak_vector_matches(library, account_a):
    unrelated = "zebra quantum saxophone"
    assert _search(account_a, unrelated, threshold=0.0, top_k=3)  # everything is a weak vector match
    assert _search(account_a, unrelated, threshold=0.5) == []  # and the threshold drops them all
    strong = _search(account_a, "paid holiday days", threshold=0.2)
    assert strong and all(h.similarity >= 0.2 for h in strong if h.similarity is not None)


def test_a_chunk_found_only_by_full_text_stays(library, account_a):
    # With an impossible threshold no vector match counts; full text still finds "espresso".
    hits = _search(account_a, "espresso", threshold=1.01)
    assert hits and all(h.document_name == "kitchen.txt" and h.similarity is None for h in hits)
    assert all("espresso" in h.text.lower() for h in hits)


def test_hybrid_fuses_both_lists(library, account_a):
    query = "encrypted laptop disk"
    vector = {h.chunk_id for h in _search(account_a, query, mode="vector", top_k=50)}
    text = {h.chunk_id for h in _search(account_a, query, mode="fulltext", top_k=50)}
    hybrid = _search(account_a, query, top_k=3)
    # A chunk in both lists outranks one in a single list of the same rank.
    assert hybrid[0].chunk_id in vector & text
    assert hybrid[0].score == pytest.approx(1 / 61 + 1 / 61, rel=0.05) or hybrid[0].score > 1 / 61


def test_deleted_documents_never_appear(library, account_a):
    from documents.services import document_delete

    kitchen = library["kitchen.txt"]
    with account_context(account_a):
        document_delete(account=account_a, document=kitchen)
    for mode in ("vector", "fulltext", "hybrid"):
        hits = _search(account_a, "fridge espresso lunch kitchen", mode=mode, top_k=50)
        assert kitchen.pk not in {h.document_id for h in hits}, mode
    with account_context(account_a):
        assert first_chunks(account=account_a, document=kitchen) == []


def test_search_refuses_to_run_outside_the_accounts_context(library, account_a, account_b):
    with pytest.raises(UnscopedQueryError):
        hybrid_search(account=account_a, query="holiday", query_vector=fake_embedding("holiday"))
    with account_context(account_b), pytest.raises(UnscopedQueryError):
        hybrid_search(account=account_a, query="holiday", query_vector=fake_embedding("holiday"))


# --- passages -----------------------------------------------------------------------------


def test_merge_overlap_removes_the_shared_text():
    assert (
        merge_overlap("one two three four five six", "four five six seven eight")
        == "one two three four five six seven eight"
    )
    assert merge_overlap("A first section.", "Another section.") == "A first section.\nAnother section."


def test_neighbours_are_added_and_adjacent_pieces_merged_without_repeating_the_overlap(library, account_a):
    holidays = library["holidays.txt"]
    chunks = _chunks(account_a, holidays)
    assert len(chunks) >= 5
    hits = [h for h in _search(account_a, "paid holiday", top_k=50) if h.document_id == holidays.pk]
    chosen = [next(h for h in hits if h.chunk_index == 1), next(h for h in hits if h.chunk_index == 2)]
    with account_context(account_a):
        passages = expand_passages(account=account_a, hits=chosen)
    assert len(passages) == 1
    passage = passages[0]
    assert (passage.chunk_start, passage.chunk_end) == (0, 3)
    assert passage.chunk_ids == tuple(c.pk for c in chunks[:4])
    assert passage.score == max(h.score for h in chosen) and passage.pages is None
    # The merged text is the source text: every chunk appears in order, no overlap twice.
    source = _text("holidays.txt").decode()
    assert passage.text in source
    assert passage.text.startswith(chunks[0].content) and passage.text.endswith(chunks[3].content)
    assert len(passage.text) < sum(len(c.content) for c in chunks[:4])


def test_passages_grouped_by_document_best_first_then_by_chunk_index(library, account_a):
    holidays, laptops = library["holidays.txt"], library["laptops.txt"]
    h_chunks, l_chunks = _chunks(account_a, holidays), _chunks(account_a, laptops)
    assert len(h_chunks) >= 6

    def hit(chunk, score, name):
        from retrieval.search import Hit

        return Hit(
            chunk_id=chunk.pk,
            document_id=chunk.document_id,
            document_name=name,
            chunk_index=chunk.chunk_index,
            page_start=None,
            page_end=None,
            score=score,
            similarity=0.5,
            text=chunk.content,
        )

    hits = [
        hit(l_chunks[0], 0.03, "laptops.txt"),
        hit(h_chunks[5], 0.02, "holidays.txt"),
        hit(h_chunks[0], 0.01, "holidays.txt"),
    ]
    with account_context(account_a):
        passages = expand_passages(account=account_a, hits=hits)
    assert [(p.document_id, p.chunk_start, p.chunk_end) for p in passages] == [
        (laptops.pk, 0, 1),
        (holidays.pk, 0, 1),
        (holidays.pk, 4, min(6, len(h_chunks) - 1)),
    ]
    assert [p.score for p in passages] == [0.03, 0.01, 0.02]


def test_first_chunks_of_a_document(library, account_a):
    holidays = library["holidays.txt"]
    chunks = _chunks(account_a, holidays)
    with account_context(account_a):
        passages = first_chunks(account=account_a, document=holidays, limit=3)
        everything = first_chunks(account=account_a, document=holidays)
    assert len(passages) == 1 and passages[0].chunk_ids == tuple(c.pk for c in chunks[:3])
    assert passages[0].text in _text("holidays.txt").decode()
    assert everything[0].chunk_end == min(len(chunks), 15) - 1


def test_pages_come_from_paged_formats(account_a, ingest):
    from documents.tests.files import make_pdf, prose_page

    pdf = ingest(
        account_a, "three.pdf", make_pdf([prose_page(n, sentences=14) for n in range(1, 4)]), "application/pdf"
    )
    query = "page"
    hits = [h for h in _search(account_a, query, threshold=0.0, top_k=50) if h.document_id == pdf.pk]
    assert hits and all(1 <= h.page_start <= h.page_end <= 3 for h in hits)
    with account_context(account_a):
        passages = expand_passages(account=account_a, hits=hits)
    assert passages[0].pages[0] >= 1 and passages[-1].pages[1] <= 3


# --- the query budget ---------------------------------------------------------------------


def test_a_search_is_a_fixed_small_number_of_queries(library, account_a, django_assert_max_num_queries):
    vector = fake_embedding("holiday laptop")
    with account_context(account_a):
        for top_k in (1, 5, 50):
            with django_assert_max_num_queries(2):
                hits = hybrid_search(account=account_a, query="holiday laptop", query_vector=vector, top_k=top_k)
            with django_assert_max_num_queries(1):
                expand_passages(account=account_a, hits=hits)


# --- charging -----------------------------------------------------------------------------


def test_search_for_query_debits_the_provider_tokens_before_searching(library, account_a):
    query = "how many paid holiday days"
    with account_context(account_a):
        before = balance_get(account=account_a)
        hits = search_for_query(account=account_a, query=query, key="search:test-1")
        entry = CreditLedgerEntry.objects.for_account(account_a).get(idempotency_key="search:test-1")
        after = balance_get(account=account_a)
    assert hits[0].document_name == "holidays.txt"
    assert entry.kind == "embedding" and entry.tokens == len(query.split()) == 5 and entry.delta == -5
    assert entry.reference == "search" and before - after == 5


def test_insufficient_credits_aborts_before_retrieval(library, account_a, monkeypatch):
    from billing.selectors import balance_get
    from billing.services import credits_debit

    with account_context(account_a):  # spend all but 2 credits, through the ledger
        credits_debit(account=account_a, tokens=balance_get(account=account_a) - 2, key="drain", kind="chat")
    called = []
    monkeypatch.setattr("retrieval.search.query.hybrid_search", lambda **kw: called.append(kw) or [])
    with account_context(account_a), pytest.raises(InsufficientCredits):
        search_for_query(account=account_a, query="how many paid holiday days", key="search:test-2")
    assert called == []
    with account_context(account_a):
        assert not CreditLedgerEntry.objects.for_account(account_a).filter(idempotency_key="search:test-2").exists()


def test_a_query_drawn_from_a_chat_turns_hold_is_written_when_the_hold_is_settled(
    library, account_a, django_assert_max_num_queries
):
    """The chat turn's way through the same embed -> charge -> search: the embedding made
    without a statement (the turn makes it outside any transaction), its charge drawn from the turn's hold and
    recorded at settle, then the search in the turn's own transaction."""
    from billing.services import credits_hold, hold_settle
    from documents.embedding import active_embedding_model

    query = "how many paid holiday days"
    with account_context(account_a):
        start = balance_get(account=account_a)
        hold = credits_hold(account=account_a, amount=500, key="turn-1")
        active = active_embedding_model(account_id=account_a.pk)
    draws = []
    with django_assert_max_num_queries(0):
        embedded = query_embed(
            account=account_a, query=query, key="turn-1:query", hold=hold, draws=draws, active=active
        )
    assert draws == [embedded.draw] and embedded.draw.tokens == embedded.tokens == 5
    assert (embedded.model, embedded.draw.kind, embedded.draw.reference) == (active.model, "embedding", "search")
    with account_context(account_a):
        found = query_search(
            account=account_a, query=query, key="turn-1:query", hold=hold, draws=draws, embedded=embedded
        )
        assert found.hits[0].document_name == "holidays.txt" and found.embedding is embedded
        assert not CreditLedgerEntry.objects.for_account(account_a).filter(idempotency_key="turn-1:query").exists()
        hold_settle(hold=hold, used_tokens=100, draws=draws)
        entry = CreditLedgerEntry.objects.for_account(account_a).get(idempotency_key="turn-1:query")
        assert (entry.kind, entry.tokens, entry.reference) == ("embedding", 5, "search")
        assert balance_get(account=account_a) == start - 5 - 100


def test_another_querys_embedding_is_refused(library, account_a):
    with account_context(account_a):
        embedded = query_embed(account=account_a, query="laptop repairs", key="search:test-3")
        with pytest.raises(ValueError):
            query_search(account=account_a, query="kitchen fridge", key="search:test-3", embedded=embedded)


# --- isolation ----------------------------------------------------------------------------


def test_another_account_never_sees_a_s_chunks_even_with_a_s_exact_text(library, account_a, account_b, ingest):
    ingest(
        account_b,
        "notes.txt",
        b"Beta team notes about the quarterly roadmap, holiday cover and the office plants.\n" * 5,
    )
    a_text = _chunks(account_a, library["holidays.txt"])[0].content
    a_ids = {c.pk for doc in library.values() for c in _chunks(account_a, doc)}
    for mode in ("vector", "fulltext", "hybrid"):
        hits = _search(account_b, a_text, mode=mode, top_k=50, threshold=0.0)
        assert hits and not {h.chunk_id for h in hits} & a_ids, mode
        assert {h.document_name for h in hits} == {"notes.txt"}, mode
    with account_context(account_b):
        leaked = expand_passages(account=account_b, hits=_search(account_a, a_text, top_k=3))
        assert leaked == []
        assert first_chunks(account=account_b, document=library["holidays.txt"]) == []


def test_the_fulltext_function_answers_only_for_the_transactions_account(library, account_a, account_b):
    with account_context(account_b), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM chunk_fulltext_search(%s, %s, 50)", [account_a.pk, "holiday"])
        assert cursor.fetchone()[0] == 0
    with account_context(account_a), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM chunk_fulltext_search(%s, %s, 50)", [account_a.pk, "holiday"])
        assert cursor.fetchone()[0] > 0
    with connection.cursor() as cursor:  # no context at all
        cursor.execute("SELECT count(*) FROM chunk_fulltext_search(%s, %s, 50)", [account_a.pk, "holiday"])
        assert cursor.fetchone()[0] == 0


def _bulk_chunks(account, count: int, *, seed: int = 7) -> None:
    """`count` synthetic chunks for `account` (COPY is refused on RLS tables: INSERT)."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with dangerously_bypass_tenancy(reason="test: a large neighbour tenant"):
        general = collection_default_ensure(account=account)
        document = Document.all_accounts.create(
            account=account,
            collection=general,
            name="bulk.txt",
            kind="text",
            content_type="text/plain",
            size=1,
            sha256="0" * 64,
            status=Status.READY,
            chunk_count=count,
        )
        Chunk.all_accounts.bulk_create(
            [
                Chunk(
                    account=account,
                    document=document,
                    collection=general,
                    revision=1,
                    chunk_index=i,
                    token_count=10,
                    content=f"holiday paid days laptop fridge filler {i}",
                    embedding=vectors[i],
                    embedding_model="synthetic",
                )
                for i in range(count)
            ],
            batch_size=1000,
        )


@pytest.mark.parametrize("exact_max", [20_000, 0], ids=["exact-path", "hnsw-iterative-path"])
def test_a_small_account_in_a_large_table_still_gets_its_k_results(library, account_a, account_b, settings, exact_max):
    _bulk_chunks(account_b, 3000)
    settings.SEARCH_EXACT_MAX_CHUNKS = exact_max
    total = sum(d.chunk_count for d in library.values())
    assert search_path_for(total) == ("exact" if exact_max else "hnsw")
    vector = fake_embedding("paid holiday days")
    with account_context(account_a):
        hits = hybrid_search(
            account=account_a, query="paid holiday days", query_vector=vector, top_k=10, threshold=-1.0, mode="vector"
        )
    assert len(hits) == 10
    assert all(h.document_id in {d.pk for d in library.values()} for h in hits)
    # The same ten as an exact ranking computed here.
    chunks = [c for d in library.values() for c in _chunks(account_a, d)]
    expected = sorted(chunks, key=lambda c: -float(np.dot(np.asarray(c.embedding), vector)))[:10]
    assert {h.chunk_id for h in hits} == {c.pk for c in expected}


def _index_def(name):
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_indexdef(to_regclass(%s))", [name])
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)  # the owner builds the index on its own connection: committed rows
def test_a_large_account_gets_an_index_of_its_own_and_search_takes_it(library, account_a, account_b, settings):
    _bulk_chunks(account_b, 3000)
    settings.SEARCH_TENANT_INDEX_MIN_CHUNKS = 2000
    settings.SEARCH_EXACT_MAX_CHUNKS = 0
    assert ensure_tenant_vector_index(account_a.pk, concurrently=False) == "absent"
    assert ensure_tenant_vector_index(account_b.pk, concurrently=False) == "created"
    assert ensure_tenant_vector_index(account_b.pk, concurrently=False) == "exists"
    assert _index_def(tenant_index_name(account_a.pk)) is None
    # Over the 384-d vectors (the expression and predicate search repeats: one index per dimension).
    assert _index_def(tenant_index_name(account_b.pk)).endswith(
        f"WHERE (((account_id + 0) = {account_b.pk}) AND (vector_dims(embedding) = 384))"
    )
    assert "USING hnsw (((embedding)::vector(384)) vector_cosine_ops)" in _index_def(tenant_index_name(account_b.pk))
    assert search_path_for(3000, tenant_index=True) == "tenant_hnsw"

    vector = fake_embedding("paid holiday days")
    with account_context(account_b), connection.cursor() as cursor:
        hits = hybrid_search(account=account_b, query="", query_vector=vector, top_k=10, threshold=-1.0, mode="vector")
        cursor.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
        cursor.execute(
            f"EXPLAIN SELECT id FROM documents_chunk AS c WHERE (c.account_id + 0) = {account_b.pk} "
            "AND vector_dims(c.embedding) = 384 "
            "ORDER BY (c.embedding::vector(384)) <=> %s::vector(384) LIMIT 40",
            [str(list(vector))],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert tenant_index_name(account_b.pk) in plan
    assert len(hits) == 10
    with account_context(account_b):
        b_chunks = dict(Chunk.objects.for_account(account_b).values_list("id", "embedding"))
    assert {h.chunk_id for h in hits} <= set(b_chunks)
    assert [h.similarity for h in hits] == sorted((h.similarity for h in hits), reverse=True)
    # Random 384-d vectors are the worst case for any graph index (recall is measured on
    # clustered data by bench/search_scale.py); a stored vector must find itself first.
    some_id = sorted(b_chunks)[1234]
    with account_context(account_b):
        itself = hybrid_search(
            account=account_b, query="", query_vector=b_chunks[some_id], top_k=10, threshold=-1.0, mode="vector"
        )
    assert itself[0].chunk_id == some_id and itself[0].similarity == pytest.approx(1.0, abs=1e-5)
    # The other account is not served from it, and sees none of its rows.
    with account_context(account_a):
        hits_a = hybrid_search(
            account=account_a, query="", query_vector=vector, top_k=10, threshold=-1.0, mode="vector"
        )
    assert hits_a and {h.document_id for h in hits_a} <= {d.pk for d in library.values()}

    # Shrunk under half the threshold: the index goes.
    settings.SEARCH_TENANT_INDEX_MIN_CHUNKS = 10_000
    assert ensure_tenant_vector_index(account_b.pk, concurrently=False) == "dropped"
    assert _index_def(tenant_index_name(account_b.pk)) is None
    with account_context(account_b):
        again = hybrid_search(account=account_b, query="", query_vector=vector, top_k=10, threshold=-1.0, mode="vector")
    assert len(again) == 10


def test_building_concurrently_refuses_to_run_inside_a_transaction(account_a):
    with pytest.raises(RuntimeError):
        ensure_tenant_vector_index(account_a.pk)


@pytest.mark.django_db(transaction=True)
def test_the_concurrent_build_outside_a_transaction(account_b, settings):
    _bulk_chunks(account_b, 600)
    settings.SEARCH_TENANT_INDEX_MIN_CHUNKS = 500
    name = tenant_index_name(account_b.pk)
    try:
        assert ensure_tenant_vector_index(account_b.pk) == "created"
        with connection.cursor() as cursor:
            cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
            assert cursor.fetchone()[0] is True
        assert ensure_tenant_vector_index(account_b.pk) == "exists"
    finally:
        tenant_vector_index_drop(account_b.pk)


# --- the API ------------------------------------------------------------------------------


@pytest.fixture
def api(client, account_a):
    key = make_api_key(account_a)

    def post(body, headers=None):
        return client.post(
            "/api/v1/search/",
            body,
            content_type="application/json",
            **({"HTTP_AUTHORIZATION": f"Bearer {key}"} if headers is None else headers),
        )

    return post


@pytest.mark.urls("retrieval.tests.test_search")
def test_api_search_shape(library, api, account_a):
    response = api({"query": "How many paid holiday days?", "top_k": 2})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert len(results) == 2
    assert set(results[0]) == {"document_id", "document_name", "chunk_index", "pages", "score", "text"}
    assert results[0]["document_name"] == "holidays.txt" and results[0]["pages"] is None
    assert results[0]["document_id"] == library["holidays.txt"].pk
    with account_context(account_a):
        keys = list(
            CreditLedgerEntry.objects.for_account(account_a)
            .filter(reference="search")
            .values_list("idempotency_key", flat=True)
        )
    assert len(keys) == 1 and keys[0].startswith("search:")
    assert api({"query": "holiday"}).status_code == 200
    with account_context(account_a):
        assert CreditLedgerEntry.objects.for_account(account_a).filter(reference="search").count() == 2


@pytest.mark.urls("retrieval.tests.test_search")
@pytest.mark.parametrize(
    "body",
    [
        {},
        {"query": ""},
        {"query": "   "},
        {"query": "x" * 2001},
        {"query": "holiday", "top_k": 0},
        {"query": "holiday", "top_k": 51},
        {"query": "holiday", "top_k": "many"},
    ],
)
def test_api_rejects_bad_bodies(api, fake_llm, body):
    response = api(body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"


@pytest.mark.urls("retrieval.tests.test_search")
def test_api_needs_a_key(client, fake_llm):
    response = client.post("/api/v1/search/", {"query": "holiday"}, content_type="application/json")
    assert response.status_code == 401


@pytest.mark.urls("retrieval.tests.test_search")
def test_api_402_without_credits_and_502_when_the_provider_is_down(library, api, account_a, fake_llm, settings):
    from billing.models import AccountBalance

    fake_llm.fail_models = {settings.EMBEDDING_MODEL: 503}
    response = api({"query": "holiday"})
    assert response.status_code == 502 and response.json()["error"]["code"] == "provider_unavailable"
    fake_llm.fail_models = {}
    with dangerously_bypass_tenancy(reason="test: empty the balance"):
        AccountBalance.all_accounts.filter(account=account_a).update(balance=0)
    response = api({"query": "holiday"})
    assert response.status_code == 402 and response.json()["error"]["code"] == "insufficient_credits"


@pytest.mark.urls("retrieval.tests.test_search")
def test_api_isolation(library, client, account_a, account_b, ingest):
    ingest(account_b, "notes.txt", b"Beta team notes about the quarterly roadmap.\n" * 5)
    key_b = make_api_key(account_b)
    a_text = _chunks(account_a, library["holidays.txt"])[0].content
    response = client.post(
        "/api/v1/search/",
        {"query": a_text[:1500], "top_k": 50},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key_b}",
    )
    assert response.status_code == 200
    names = {r["document_name"] for r in response.json()["results"]}
    assert names <= {"notes.txt"}
    assert not {r["document_id"] for r in response.json()["results"]} & {d.pk for d in library.values()}
