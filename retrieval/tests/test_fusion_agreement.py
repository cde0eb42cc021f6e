"""Full text counts less when it and the vector list disagree entirely (retrieval/search/query.py
`_fuse`): a German question about English documents matched their words "Python" and "Speicher"
nowhere near the meaning, and reciprocal rank fusion gave those hits a share of the top 3
(bench fusion_weight: multilingual recall@3 0.67 with full weight, 0.72 at a quarter)."""

from retrieval.search.query import DISJOINT_TEXT_WEIGHT, _fuse


def _row(chunk_id, distance=None, rank=None):
    return (chunk_id, 1, "doc.txt", chunk_id, None, None, distance, rank, f"chunk {chunk_id}", False)


def test_disjoint_full_text_hits_rank_below_the_vector_list():
    vector = [_row(i, distance=0.1 + i / 100) for i in range(1, 11)]
    text = [_row(100 + i, rank=1.0 - i / 100) for i in range(1, 11)]
    hits = _fuse(vector + text, top_k=5, threshold=0.1)
    assert [h.chunk_id for h in hits] == [1, 2, 3, 4, 5]
    assert DISJOINT_TEXT_WEIGHT < 1.0


def test_agreeing_lists_fuse_as_before():
    """One shared chunk among the first ten: full text counts fully, and a chunk both lists
    found comes first; a text-only hit still outranks the vector list's tail."""
    vector = [_row(i, distance=0.1 + i / 100) for i in range(1, 11)]
    text = [_row(7, distance=0.17, rank=0.99)] + [_row(100 + i, rank=0.9 - i / 100) for i in range(1, 10)]
    hits = _fuse(vector[:6] + vector[7:] + text, top_k=4, threshold=0.1)
    assert hits[0].chunk_id == 7
    assert 101 in [h.chunk_id for h in hits]  # 1/(60+2) for text rank 2 beats vector rank 4's 1/(60+4)


def test_a_keyword_query_keeps_full_texts_whole_weight():
    """ "zanzibar", an error code: a word or two is what full text is for, whatever the vector
    list found (retrieval/tests/test_search_explain.py has it end to end)."""
    vector = [_row(i, distance=0.1 + i / 100) for i in range(1, 11)]
    hits = _fuse(vector + [_row(101, rank=0.9)], top_k=3, threshold=0.1, sentence=False)
    assert 101 in [h.chunk_id for h in hits]


def test_full_text_alone_still_answers():
    hits = _fuse([_row(5, rank=0.5)], top_k=3, threshold=0.1)
    assert [h.chunk_id for h in hits] == [5] and hits[0].passed
