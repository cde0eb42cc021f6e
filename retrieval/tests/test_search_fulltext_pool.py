"""Full text ranks a bounded pool of matches (migration 0012): among many
chunks sharing a common word it still finds the one with all the query's words, it gives
the unbounded ranking whenever the matches fit in the pool, a deleting document takes no
room in it, and it never crosses tenants, even when both accounts hold the same text."""

import numpy as np
import pytest
from django.db import connection

from core.tenancy import account_context, dangerously_bypass_tenancy
from documents.models import Chunk, Document, Status
from documents.services import collection_default_ensure
from retrieval.search import hybrid_search
from retrieval.search import query as search_query

POOL = 50
COMMON = "The holiday rota is pinned in the kitchen, next to the holiday calendar. "
RIGHT = "Holiday requests for the espresso descaling week go to the facilities desk. "


def _document(account, name: str, texts: list[str], *, status: str = Status.READY) -> Document:
    """A document of `texts`, one chunk each, in chunk order (so in insertion order on disk)."""
    rng = np.random.default_rng(len(texts))
    with dangerously_bypass_tenancy(reason="test: many matching chunks"):
        general = collection_default_ensure(account=account)
        document = Document.all_accounts.create(
            account=account,
            collection=general,
            name=name,
            kind="text",
            content_type="text/plain",
            size=1,
            sha256=f"{name:0>64}"[:64],
            status=status,
            chunk_count=len(texts),
        )
        vectors = rng.normal(size=(len(texts), 384)).astype(np.float32)
        Chunk.all_accounts.bulk_create(
            [
                Chunk(
                    account=account,
                    document=document,
                    collection=general,
                    revision=1,
                    chunk_index=i,
                    token_count=20,
                    content=text,
                    embedding=vectors[i] / np.linalg.norm(vectors[i]),
                    embedding_model="synthetic",
                )
                for i, text in enumerate(texts)
            ]
        )
    return document


def _fulltext(account, query: str, *, top_k: int = 10, pool: int = POOL):
    original = search_query.FULLTEXT_POOL
    search_query.FULLTEXT_POOL = pool
    try:
        with account_context(account):
            return hybrid_search(
                account=account, query=query, query_vector=np.ones(384, dtype=np.float32), top_k=top_k, mode="fulltext"
            )
    finally:
        search_query.FULLTEXT_POOL = original


def _ids(account, document) -> list[int]:
    with account_context(account):
        return list(
            Chunk.objects.for_account(account)
            .filter(document=document)
            .order_by("chunk_index")
            .values_list("id", flat=True)
        )


@pytest.fixture
def crowded(account_a, account_b):
    """Each account: 6 × POOL chunks sharing the word "holiday", then (last on disk, past any
    pool read in physical order) one chunk with all the words of the question."""
    documents = {}
    for account in (account_a, account_b):
        documents[account.pk] = _document(
            account, "rota.txt", [f"{COMMON} Week {i}." for i in range(6 * POOL)] + [RIGHT]
        )
    return documents


QUESTION = "holiday espresso descaling"


def test_the_chunk_with_all_the_words_wins_among_many_with_one(crowded, account_a):
    hits = _fulltext(account_a, QUESTION)
    right = _ids(account_a, crowded[account_a.pk])[-1]
    assert hits[0].chunk_id == right
    assert hits[0].text == RIGHT
    assert len(hits) == 10  # the rest of the list still comes from the common word


def test_never_another_accounts_chunks_even_with_the_same_text(crowded, account_a, account_b):
    a_ids, b_ids = set(_ids(account_a, crowded[account_a.pk])), set(_ids(account_b, crowded[account_b.pk]))
    for account, own in ((account_a, a_ids), (account_b, b_ids)):
        hits = _fulltext(account, QUESTION, top_k=50)
        assert len(hits) == 50
        assert {h.chunk_id for h in hits} <= own
    # The function itself, asked for A's chunks from B's context, answers nothing.
    with account_context(account_b), connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM chunk_fulltext_search(%s, %s, 50, NULL, %s)", [account_a.pk, QUESTION, POOL]
        )
        assert cursor.fetchone()[0] == 0


def test_matches_that_fit_in_the_pool_rank_exactly_as_unbounded(crowded, account_a):
    # "descaling" alone matches one chunk; "week" all of them: with a pool larger than the
    # matches, the bounded list is the unbounded one, order and scores included.
    for question in ("espresso descaling", "facilities week", QUESTION):
        bounded = _fulltext(account_a, question, top_k=40, pool=10 * POOL)
        unbounded = _fulltext(account_a, question, top_k=40, pool=2**31 - 1)
        assert [(h.chunk_id, h.score) for h in bounded] == [(h.chunk_id, h.score) for h in unbounded]


def test_a_deleting_document_takes_no_room_in_the_pool(account_a):
    # A document being deleted holds many chunks with all the words, ahead on disk of the
    # one live chunk with them: the live one is still found, the deleting ones never.
    deleting = _document(account_a, "old.txt", [RIGHT] * (3 * POOL), status=Status.DELETING)
    live = _document(account_a, "new.txt", [COMMON] * POOL + [RIGHT])
    hits = _fulltext(account_a, QUESTION, top_k=10)
    assert hits[0].chunk_id == _ids(account_a, live)[-1]
    assert not {h.document_id for h in hits} & {deleting.pk}


@pytest.mark.django_db(transaction=True)  # ANALYZE (the owner's own connection) sees committed rows only
def test_a_pool_too_small_for_the_matches_keeps_the_chunks_with_the_rarer_words(account_a):
    # No chunk has all three words; 6 × POOL have the common one, and one, last on disk, has
    # the two rare ones, twice (the best rank of all). The pool fills with the chunks of the
    # rarest words first (rarity from the column's statistics), so that chunk is ranked, and
    # first; read in disk order, the pool would have held only "holiday" chunks.
    from core.db_owner import owner_connection

    document = _document(
        account_a,
        "rota.txt",
        [f"{COMMON} Week {i}." for i in range(6 * POOL)]
        + ["The espresso machine needs descaling: espresso descaling is monthly."],
    )
    with owner_connection() as conn:
        conn.execute("ANALYZE documents_chunk")
    hits = _fulltext(account_a, QUESTION)
    assert hits[0].chunk_id == _ids(account_a, document)[-1]
