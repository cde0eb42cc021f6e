"""Passages: search hits grown into readable context for the agent. Each hit with its
previous and next chunk (same document and revision), consecutive chunks of a document
merged without repeating their overlap, grouped by document; and the first chunks of one
document (for "summarize <document>"). One query each, inside the caller's account
context, never from a document being deleted or in a collection the principal may not see
(neighbours are of the hit's own document, so they never cross into another collection)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from django.conf import settings
from django.db import connection

from documents.models import (
    READABLE_DOCUMENT_SQL,
    RETRIEVABLE_BY_TAGS_SQL,
    VISIBLE_DOCUMENT_SQL,
)
from documents.tags import tags_filter
from retrieval.search.query import Hit, account_id_in_context

# Overlap between consecutive chunks is at most CHUNK_OVERLAP (200) characters; a shorter
# common piece than this is a coincidence (a full stop, a space), not an overlap.
MIN_OVERLAP = 12


@dataclass(frozen=True)
class Passage:
    """Hits expanded with their neighbours, adjacent pieces of one document merged."""

    document_id: int
    document_name: str
    chunk_start: int
    chunk_end: int
    pages: tuple[int, int] | None
    score: float
    text: str
    chunk_ids: tuple[int, ...]
    ocr_ids: tuple[int, ...] = ()  # those of its chunks whose text was (partly) read by OCR


_NEIGHBOURS_SQL = f"""
SELECT DISTINCT n.id, n.document_id, d.name, n.chunk_index, n.page_start, n.page_end, n.content,
       n.text_source = 'ocr'
FROM documents_chunk AS h
JOIN documents_chunk AS n
  ON n.document_id = h.document_id AND n.revision = h.revision AND n.account_id = %(account_id)s
 AND n.chunk_index BETWEEN h.chunk_index - 1 AND h.chunk_index + 1
JOIN documents_document AS d ON d.id = n.document_id AND d.account_id = %(account_id)s
WHERE h.id = ANY(%(ids)s::bigint[]) AND h.account_id = %(account_id)s AND {VISIBLE_DOCUMENT_SQL}
  AND {READABLE_DOCUMENT_SQL}
"""

_FIRST_SQL = f"""
SELECT c.id, c.document_id, d.name, c.chunk_index, c.page_start, c.page_end, c.content, c.text_source = 'ocr'
FROM documents_chunk AS c
JOIN documents_document AS d ON d.id = c.document_id AND d.account_id = %(account_id)s
WHERE c.document_id = %(document_id)s AND c.account_id = %(account_id)s AND {VISIBLE_DOCUMENT_SQL}
  AND {READABLE_DOCUMENT_SQL} AND {RETRIEVABLE_BY_TAGS_SQL}
ORDER BY c.chunk_index
LIMIT %(limit)s
"""


def ocr_chunk_ids(passages: list[Passage]) -> set[int]:
    """The ids of the passages' chunks whose text was read by OCR (their citations say so):
    read with the chunks themselves, no query."""
    return {chunk_id for passage in passages for chunk_id in passage.ocr_ids}


def merge_overlap(left: str, right: str, *, max_overlap: int | None = None) -> str:
    """`left` followed by `right` without the text they share: consecutive chunks repeat up
    to CHUNK_OVERLAP characters of `left`'s end at `right`'s start. With no such overlap
    (the chunker started fresh at a section break) they are joined by a newline."""
    limit = min(len(left), len(right), (max_overlap or settings.CHUNK_OVERLAP) * 2)
    # The longest overlap first: a suffix of `left` that `right` starts with begins with
    # right's first MIN_OVERLAP characters, so only where those occur is compared.
    tail, probe = left[len(left) - limit :], right[:MIN_OVERLAP]
    at = tail.find(probe) if limit >= MIN_OVERLAP else -1
    while at != -1 and len(tail) - at >= MIN_OVERLAP:
        if right.startswith(tail[at:]):
            return left + right[len(tail) - at :]
        at = tail.find(probe, at + 1)
    return left.rstrip() + "\n" + right.lstrip()


def _passages(rows, scores: dict[int, float]) -> list[Passage]:
    """Merge rows (chunk fields) of consecutive chunk_index per document into passages."""
    rows = sorted(set(rows), key=lambda r: (r[1], r[3]))
    passages = []
    for _document_id, doc_rows in groupby(rows, key=lambda r: r[1]):
        doc_rows = list(doc_rows)
        run = [doc_rows[0]]
        for row in doc_rows[1:]:
            if row[3] == run[-1][3] + 1:
                run.append(row)
            else:
                passages.append(_passage(run, scores))
                run = [row]
        passages.append(_passage(run, scores))
    return passages


def _passage(run, scores: dict[int, float]) -> Passage:
    text = run[0][6]
    for row in run[1:]:
        text = merge_overlap(text, row[6])
    starts = [r[4] for r in run if r[4] is not None]
    ends = [r[5] for r in run if r[5] is not None]
    return Passage(
        document_id=run[0][1],
        document_name=run[0][2],
        chunk_start=run[0][3],
        chunk_end=run[-1][3],
        pages=(min(starts), max(ends)) if starts and ends else None,
        score=max((scores.get(r[0], 0.0) for r in run), default=0.0),
        text=text,
        chunk_ids=tuple(r[0] for r in run),
        ocr_ids=tuple(r[0] for r in run if r[7]),
    )


def hit_passages(hits: list[Hit]) -> list[Passage]:
    """Each hit as a passage of its own chunk, in rank order (the short context a small
    model reads best)."""
    return [
        Passage(
            document_id=h.document_id,
            document_name=h.document_name,
            chunk_start=h.chunk_index,
            chunk_end=h.chunk_index,
            pages=(h.page_start, h.page_end) if h.page_start is not None and h.page_end is not None else None,
            score=h.score,
            text=h.text,
            chunk_ids=(h.chunk_id,),
            ocr_ids=(h.chunk_id,) if h.ocr else (),
        )
        for h in hits
    ]


def expand_passages(*, account, hits: list[Hit]) -> list[Passage]:
    """Each hit with its previous and next chunk (same document and revision), overlapping or
    adjacent pieces of a document merged into one passage without repeating the overlap.

    Ordered by document (best hit first), then by chunk_index within the document. A
    passage's score is its best hit's. One query.
    """
    account_id = account_id_in_context(account)
    if not hits:
        return []
    with connection.cursor() as cursor:
        cursor.execute(_NEIGHBOURS_SQL, {"account_id": account_id, "ids": [h.chunk_id for h in hits]})
        rows = cursor.fetchall()
    scores = {h.chunk_id: h.score for h in hits}
    best: dict[int, float] = {}
    for hit in hits:
        best[hit.document_id] = max(best.get(hit.document_id, 0.0), hit.score)
    passages = _passages(rows, scores)
    order = {doc: i for i, doc in enumerate(sorted(best, key=lambda d: (-best[d], d)))}
    passages.sort(key=lambda p: (order.get(p.document_id, len(order)), p.chunk_start))
    return passages


def first_chunks(
    *, account, document, limit: int = 15, tags: list[str] | None = None, exclude_tags: list[str] | None = None
) -> list[Passage]:
    """The first `limit` chunks of `document` (for "summarize <document>"), merged into one
    passage per consecutive run (normally one). Empty for a deleting or foreign document, and
    for one its tags leave out (the account's excluded tags, `exclude_tags`, or without any of
    `tags` when given: RETRIEVABLE_BY_TAGS_SQL)."""
    account_id = account_id_in_context(account)
    with connection.cursor() as cursor:
        cursor.execute(
            _FIRST_SQL,
            {
                "account_id": account_id,
                "document_id": getattr(document, "pk", document),
                "limit": max(1, int(limit)),
                "tags": tags_filter(tags, field="tags"),
                "exclude_tags": tags_filter(exclude_tags, field="exclude_tags") or [],
            },
        )
        rows = cursor.fetchall()
    return _passages(rows, {}) if rows else []
