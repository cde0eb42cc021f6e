"""Tags steer retrieval in the same SQL as collections: `tags` narrows to
documents carrying any of them, `exclude_tags` and the account's excluded tags leave
documents out, on both paths (vector and full text) and for summaries, so top_k stays k
when the best chunks are left out; the HNSW index is still used; isolation."""

import pytest
from django.db import connection

from core.db_owner import owner_connection
from core.tenancy import account_context, dangerously_bypass_tenancy
from documents.errors import TagsInvalid
from documents.models import Chunk, Document, Status
from documents.services import collection_default_ensure
from documents.tags import retrieval_exclude_tags_set
from llm.fake_server import fake_embedding
from retrieval.search import (
    ensure_tenant_vector_index,
    first_chunks,
    hybrid_search,
    query_search,
    search_for_query,
    sql,
    tenant_index_name,
)
from retrieval.tests.test_search import _bulk_chunks

QUERY = "parental leave weeks paid"


def _document(account, name, *, tags=(), chunks=3, text=QUERY):
    """A ready document of `chunks` chunks, each with `text` and its vector (the query's own
    vector for the default text: the best possible match)."""
    with dangerously_bypass_tenancy(reason="test: synthetic documents"):
        general = collection_default_ensure(account=account)
        document = Document.all_accounts.create(
            account=account,
            collection=general,
            name=name,
            kind="text",
            content_type="text/plain",
            size=1,
            sha256=name.ljust(64, "0")[:64],
            status=Status.READY,
            chunk_count=chunks,
            tags=list(tags),
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
                    content=f"{text} {name} part {i}",
                    embedding=fake_embedding(f"{text} {name} part {i}"),
                    embedding_model="fake-embedding",
                )
                for i in range(chunks)
            ]
        )
    return document


def _search(account, query=QUERY, **kwargs):
    kwargs.setdefault("embedding_model", "fake-embedding")
    with account_context(account):
        return hybrid_search(account=account, query=query, query_vector=fake_embedding(query), **kwargs)


@pytest.fixture
def shelf(account_a):
    return {
        "policy": _document(account_a, "policy.txt", tags=["HR", "policy"]),
        "draft": _document(account_a, "draft.txt", tags=["draft"]),
        "plain": _document(account_a, "plain.txt"),
    }


@pytest.mark.parametrize("mode", ["hybrid", "vector", "fulltext"])
def test_tags_narrow_to_documents_with_any_of_them(shelf, account_a, mode):
    names = {h.document_name for h in _search(account_a, tags=["hr"], top_k=20, mode=mode)}
    assert names == {"policy.txt"}
    names = {h.document_name for h in _search(account_a, tags=["Draft", "policy"], top_k=20, mode=mode)}
    assert names == {"policy.txt", "draft.txt"}
    assert _search(account_a, tags=["nothing-has-this"], mode=mode) == []


@pytest.mark.parametrize("mode", ["hybrid", "vector", "fulltext"])
def test_exclude_tags_leave_documents_out(shelf, account_a, mode):
    names = {h.document_name for h in _search(account_a, exclude_tags=["DRAFT"], top_k=20, mode=mode)}
    assert names == {"policy.txt", "plain.txt"}
    both = _search(account_a, tags=["policy", "draft"], exclude_tags=["hr"], top_k=20, mode=mode)
    assert {h.document_name for h in both} == {"draft.txt"}


@pytest.mark.parametrize("mode", ["hybrid", "vector", "fulltext"])
def test_the_accounts_excluded_tags_apply_to_every_search(shelf, account_a, mode):
    with account_context(account_a):
        retrieval_exclude_tags_set(account=account_a, actor=None, exclude_tags=["Draft"])
    names = {h.document_name for h in _search(account_a, top_k=20, mode=mode)}
    assert names == {"policy.txt", "plain.txt"}
    # Asking for the excluded tag does not bring it back.
    assert _search(account_a, tags=["draft"], mode=mode) == []


@pytest.mark.parametrize("exact_max", [20_000, 0], ids=["exact-path", "hnsw-iterative-path"])
@pytest.mark.parametrize("mode", ["hybrid", "vector", "fulltext"])
def test_top_k_stays_k_when_the_best_chunks_are_excluded(account_a, settings, exact_max, mode):
    settings.SEARCH_EXACT_MAX_CHUNKS = exact_max
    # 60 near-duplicates of the query (more than the 40 candidates each path takes) in
    # documents the search leaves out, and three weaker allowed documents.
    for i in range(10):
        _document(account_a, f"secret-{i}.txt", tags=["secret"], chunks=6)
    allowed = {_document(account_a, f"allowed-{i}.txt", chunks=2, text="parental leave").pk for i in range(3)}
    hits = _search(account_a, top_k=3, exclude_tags=["secret"], mode=mode)
    assert len(hits) == 3 and {h.document_id for h in hits} <= allowed
    with account_context(account_a):
        retrieval_exclude_tags_set(account=account_a, actor=None, exclude_tags=["secret"])
    hits = _search(account_a, top_k=3, mode=mode)
    assert len(hits) == 3 and {h.document_id for h in hits} <= allowed
    hits = _search(account_a, top_k=5, tags=["nope", "secret"], mode=mode)
    assert hits == []


def test_a_search_with_tags_is_still_two_queries(shelf, account_a, django_assert_max_num_queries):
    with account_context(account_a):
        retrieval_exclude_tags_set(account=account_a, actor=None, exclude_tags=["draft"])
        with django_assert_max_num_queries(2):
            hybrid_search(
                account=account_a,
                query=QUERY,
                query_vector=fake_embedding(QUERY),
                tags=["policy"],
                exclude_tags=["x"],
                embedding_model="fake-embedding",
            )


@pytest.mark.django_db(transaction=True)  # the owner builds the index on its own connection
def test_the_vector_statement_with_excluded_documents_still_uses_the_hnsw_index(account_b, settings):
    _bulk_chunks(account_b, 3000)
    settings.SEARCH_TENANT_INDEX_MIN_CHUNKS = 2000
    assert ensure_tenant_vector_index(account_b.pk, concurrently=False) == "created"
    with owner_connection() as owner:  # fresh statistics: the planner's choice, not stale estimates
        owner.execute("ANALYZE documents_chunk")
    with account_context(account_b), connection.cursor() as cursor:
        collection = collection_default_ensure(account=account_b)
        cursor.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
        cursor.execute(
            "EXPLAIN " + sql.VECTOR_TENANT_HNSW.format(account_id=account_b.pk, dims=384),
            {
                "collections": [collection.pk],
                "deleting": list(range(10**9, 10**9 + 50)),
                "model": "synthetic",
                "vector": str(fake_embedding(QUERY)),
                "candidates": 40,
            },
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert tenant_index_name(account_b.pk) in plan, plan
    # The left-out documents are a filter of that scan (hashed: <> ALL), not a second pass.
    assert "document_id <> ALL" in plan, plan
    assert ensure_tenant_vector_index(account_b.pk, concurrently=False) == "exists"
    settings.SEARCH_TENANT_INDEX_MIN_CHUNKS = 10_000
    assert ensure_tenant_vector_index(account_b.pk, concurrently=False) == "dropped"


def test_first_chunks_leave_out_an_excluded_document(shelf, account_a):
    with account_context(account_a):
        assert first_chunks(account=account_a, document=shelf["draft"])
        assert first_chunks(account=account_a, document=shelf["draft"], exclude_tags=["draft"]) == []
        assert first_chunks(account=account_a, document=shelf["draft"], tags=["hr"]) == []
        retrieval_exclude_tags_set(account=account_a, actor=None, exclude_tags=["draft"])
        assert first_chunks(account=account_a, document=shelf["draft"]) == []
        assert first_chunks(account=account_a, document=shelf["policy"])


@pytest.mark.parametrize("value", ["draft", [""], ["x" * 41], ["a\nb"], ["a,b"], [1], [f"t{i}" for i in range(21)]])
def test_malformed_filter_tags_are_refused_before_anything_is_charged(shelf, account_a, fake_llm, value):
    from billing.models import CreditLedgerEntry

    with account_context(account_a):
        with pytest.raises(TagsInvalid) as raised:
            query_search(account=account_a, query=QUERY, key="search:t", tags=value)
        assert raised.value.status == 400 and raised.value.code == "invalid_tags"
        with pytest.raises(TagsInvalid):
            search_for_query(account=account_a, query=QUERY, key="search:t", exclude_tags=value)
        assert not CreditLedgerEntry.objects.for_account(account_a).filter(reference="search").exists()


def test_another_accounts_excluded_tags_do_not_apply(shelf, account_a, account_b):
    _document(account_b, "b-draft.txt", tags=["draft"])
    with account_context(account_a):
        retrieval_exclude_tags_set(account=account_a, actor=None, exclude_tags=["draft"])
    assert {h.document_name for h in _search(account_b, top_k=20)} == {"b-draft.txt"}
    assert "draft.txt" not in {h.document_name for h in _search(account_a, top_k=20)}
