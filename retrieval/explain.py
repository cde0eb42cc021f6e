"""What a search found, as the search API answers it (`POST search/`, with or without
`"explain": true`) and the Knowledge base's Retrieval test page shows it: one shape for both.

With explain, `vector_rank`/`vector_score` are where the vector path put a chunk among its
candidates, also when its similarity is under the threshold (then that path adds nothing to
the fused score, `passed_threshold` is false, and the chunk is a result only because full
text found it, else it is listed in `below_threshold`).
"""

from __future__ import annotations

from billing import pricing


def search_result(hit) -> dict:
    pages = [hit.page_start, hit.page_end] if hit.page_start is not None and hit.page_end is not None else None
    return {
        "document_id": hit.document_id,
        "document_name": hit.document_name,
        "chunk_index": hit.chunk_index,
        "pages": pages,
        "score": round(hit.score, 6),
        "text": hit.text,
    }


def explained_result(hit, rank: int | None, threshold: float) -> dict:
    score = hit.vector_similarity
    return {
        **search_result(hit),
        "rank": rank,
        "vector_rank": hit.vector_rank,
        "fulltext_rank": hit.fulltext_rank,
        "vector_score": None if score is None else round(score, 6),
        "passed_threshold": score is not None and score >= threshold,
    }


def explained_search(found, *, threshold: float) -> dict:
    """The explain answer of a `query_search` (`explain=True`): also shown by the Knowledge
    base's Retrieval test page (retrieval/views.py)."""
    embedding = found.embedding
    return {
        "results": [explained_result(hit, rank, threshold) for rank, hit in enumerate(found.hits, start=1)],
        "threshold": threshold,
        "below_threshold": [explained_result(hit, None, threshold) for hit in found.below_threshold],
        "charged": {
            "tokens": embedding.tokens,
            "model": embedding.model,
            "credits": pricing.credits_for(kind=pricing.EMBEDDING, tokens=embedding.tokens, model=embedding.model),
        },
    }
