"""What a chat turn reads from the account's documents, by its route: the first chunks of
the document a summary names, or the passages a lookup finds through
`retrieval.search.query_search` (the one embed -> charge -> search the search API and MCP
call too), or none when nothing found is near enough to answer from. And what a lookup
searches: the question, or a follow-up made standalone.

Everything here runs in the turn's own account context (chat.agent.turn_prepare) but the
follow-up rewrite, a model call made outside any transaction. What it spends is drawn
from the turn's hold (`draws`, billing.services.HoldDraw) and written when the hold is
settled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings

from billing.models import CreditHold, Kind
from billing.services import HoldDraw
from chat import answering
from chat.router import GENERAL, LOOKUP, SUMMARY, Route, match_document, previous_question, standalone_query
from documents.models import Document, Status
from documents.selectors import document_ids_retrievable
from llm import client as llm
from llm.embedding_specs import embedding_spec
from retrieval.search import (
    Passage,
    QueryEmbedding,
    expand_passages,
    first_chunks,
    hit_passages,
    ocr_chunk_ids,
    query_search,
)

MAX_QUESTION_CHARS = 4000
SUMMARY_CHUNKS = 15  # how much of a document "summarize <document>" reads from its start
REWRITE_MAX_TOKENS = 64
NEAREST_SHOWN = 3  # the closest passages listed with "Your documents don't cover this."
BUNDLED_MIN_RELEVANCE = 0.58  # an embedding model not calibrated (llm/embedding_specs.py): MiniLM's


@dataclass(frozen=True)
class Retrieved:
    """The passages the model reads, and the route the turn answers by: a lookup whose best
    passage is not near enough to answer from comes back GENERAL, with none."""

    route: str
    passages: list[Passage]
    # GENERAL: the closest passages found, not near enough to answer from (shown as sources
    # when the model may not answer from general knowledge).
    nearest: list[Passage] = field(default_factory=list)


def relevance_rule(model: str) -> tuple[float, float]:
    """(floor, coverage weight) for text retrieved with embedding `model`: settings.RAG_MIN_RELEVANCE,
    or on the bundled chat models the embedding model's calibrated floor (llm/embedding_specs.py);
    no floor for a provider's model, which is told to say when the chunks do not answer."""
    spec = embedding_spec(model)
    weight = spec.coverage_weight if spec.relevance_floor is not None else answering.COVERAGE_WEIGHT
    if settings.RAG_MIN_RELEVANCE is not None:
        return settings.RAG_MIN_RELEVANCE, weight
    if not settings.LLM_BUNDLED:
        return 0.0, weight
    return (spec.relevance_floor if spec.relevance_floor is not None else BUNDLED_MIN_RELEVANCE), weight


def search_query(
    question: str, history: list[tuple[str, str]], *, rewrite: bool, key: str, draws: list[HoldDraw]
) -> str:
    """What a lookup searches: the question, or for a follow-up a standalone query (the chat
    model's rewrite when `rewrite`, else the question with the one before it)."""
    if not previous_question(question, history):
        return question
    return (
        _rewrite_followup(question, history, key=key, draws=draws) if rewrite else standalone_query(question, history)
    )


def rewrite_messages(question: str, history: list[tuple[str, str]]) -> list[dict]:
    """What the chat model is asked to make a follow-up standalone (the hold counts it too)."""
    recent = "\n".join(f"{role}: {text[:600]}" for role, text in history[-4:])
    return [
        {
            "role": "system",
            "content": (
                "Rewrite the user's last question as one standalone search query that names what it refers "
                "to. Reply with the query only."
            ),
        },
        {"role": "user", "content": f"Conversation:\n{recent}\n\nLast question: {question}"},
    ]


def _rewrite_followup(question: str, history: list[tuple[str, str]], key: str, draws: list[HoldDraw]) -> str:
    """A follow-up made standalone by the chat model (charged like a chat call, drawn from
    the turn's hold: appended to `draws`); the deterministic rewrite when the model fails."""
    stream = llm.chat(rewrite_messages(question, history), temperature=0.0, max_tokens=REWRITE_MAX_TOKENS)
    try:
        text = "".join(stream).strip().strip('"')
    except llm.ProviderError:
        return standalone_query(question, history)
    usage = stream.final_usage()
    if usage.total_tokens:
        draws.append(
            HoldDraw(key=key, kind=Kind.CHAT, tokens=usage.total_tokens, model=stream.model, provider=stream.provider)
        )
    return text.splitlines()[0][:MAX_QUESTION_CHARS] if text else standalone_query(question, history)


def turn_passages(
    *,
    account,
    route: Route,
    query: str,
    embedded: QueryEmbedding | None,
    collection_ids: list[int] | None,
    hold: CreditHold,
    draws: list[HoldDraw],
    key: str,
    limit: int | None,
    tags: list[str] | None = None,
    exclude_tags: list[str] | None = None,
) -> Retrieved:
    """The passages for the turn's route, in the caller's account context. A lookup searches
    `query` with `embedded` (its query_embed, made before this transaction); a summary of a
    document that is not there looks its words up instead, embedded here (a rare path).
    `limit`: the model reads that many single hits (None: every hit with its neighbours).
    `tags` / `exclude_tags` (and the account's excluded tags, always) steer both routes: a
    summary names only a document they let through, a lookup searches only those."""
    if route.kind == GENERAL:
        return Retrieved(GENERAL, [])
    if route.kind == SUMMARY:
        document = _summary_document(account, route.summary_target, collection_ids, tags, exclude_tags)
        if document is not None:
            return Retrieved(
                SUMMARY,
                first_chunks(
                    account=account, document=document, limit=SUMMARY_CHUNKS, tags=tags, exclude_tags=exclude_tags
                ),
            )
    found = query_search(
        account=account,
        query=query,
        key=key,
        collection_ids=collection_ids,
        hold=hold,
        draws=draws,
        embedded=embedded,
        tags=tags,
        exclude_tags=exclude_tags,
    )
    passages = expand_passages(account=account, hits=found.hits)
    floor, weight = relevance_rule(found.embedding.model)
    if not passages or answering.relevance(query, found.hits, passages, weight) < floor:
        return Retrieved(GENERAL, [], nearest=hit_passages(found.hits[: limit or NEAREST_SHOWN]))
    return Retrieved(LOOKUP, hit_passages(found.hits[:limit]) if limit else passages)


def _summary_document(
    account, target: str, collection_ids: list[int] | None, tags: list[str] | None, exclude_tags: list[str] | None
) -> Document | None:
    """The ready document a summary names, among those the principal may read in the
    collections asked for that its tags let through (RETRIEVABLE_BY_TAGS_SQL, the rule
    search uses)."""
    documents = Document.objects.for_account(account).readable().filter(status=Status.READY)
    if collection_ids is not None:
        documents = documents.filter(collection_id__in=collection_ids)
    documents = list(documents)
    allowed = document_ids_retrievable(
        account=account, document_ids=[d.pk for d in documents], tags=tags, exclude_tags=exclude_tags
    )
    return match_document(target, [d for d in documents if d.pk in allowed])


def numbered_sources(passages: list[Passage]) -> list[dict]:
    """Each passage as a numbered source, the N of its [Document N]; `"ocr": true` on one
    whose text was (partly) read by OCR, so its citation says so."""
    ocr_ids = ocr_chunk_ids(passages)
    return [
        {
            "n": n,
            "document_id": p.document_id,
            "document_name": p.document_name,
            "chunk_index": p.chunk_start,
            "pages": list(p.pages) if p.pages else None,
            "score": round(float(p.score), 4),
            **({"ocr": True} if ocr_ids.intersection(p.chunk_ids) else {}),
        }
        for n, p in enumerate(passages, start=1)
    ]
