"""What the app must know about an embedding model to call it: the text it puts before a
search query and before a document's text.

E5-family models are trained with "query: " / "passage: " and are markedly worse without
them; MiniLM and most others take the bare text. The prefix is the app's, added before the
openai client is called (llm.client.embed), so the same model hosted by a provider (e.g.
"intfloat/multilingual-e5-small" behind LLM_BASE_URL) is embedded exactly as the bundled one.
The spec is looked up by the model's name, its last path segment, case-insensitively; a name
not listed takes the bare text. It lives on the llm floor because ingestion (documents/) and
search (retrieval/) both embed; retrieval/embedding_models.py migrates between models.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Purpose(StrEnum):
    QUERY = "query"
    PASSAGE = "passage"


@dataclass(frozen=True)
class EmbeddingSpec:
    name: str
    dimensions: int
    query_prefix: str = ""
    passage_prefix: str = ""
    # How near retrieved text must be for a bundled chat model to answer from it (chat/retrieve.py):
    # best vector similarity + coverage_weight x the best passage's share of the question's words,
    # at least relevance_floor. Each model has its own scale of similarities (unrelated text: ~0.2
    # for MiniLM, ~0.75 for e5), so both are the model's, calibrated by `python -m bench
    # relevance_floor` on the answer evaluation's corpora (docs/benchmarks.md). None: not calibrated.
    relevance_floor: float | None = None
    coverage_weight: float = 0.35

    def prefixed(self, texts: list[str], purpose: Purpose) -> list[str]:
        prefix = self.query_prefix if purpose == Purpose.QUERY else self.passage_prefix
        return [prefix + t for t in texts] if prefix else list(texts)


KNOWN = {
    spec.name: spec
    for spec in (
        EmbeddingSpec("all-minilm-l6-v2", 384, relevance_floor=0.58),
        # e5's coverage term let in near-domain questions the documents do not answer (their
        # words are the documents'): the similarity alone separates better.
        EmbeddingSpec(
            "multilingual-e5-small",
            384,
            query_prefix="query: ",
            passage_prefix="passage: ",
            relevance_floor=0.82,
            coverage_weight=0.0,
        ),
        EmbeddingSpec("multilingual-e5-base", 768, query_prefix="query: ", passage_prefix="passage: "),
        EmbeddingSpec("multilingual-e5-large", 1024, query_prefix="query: ", passage_prefix="passage: "),
    )
}


def embedding_spec(model: str) -> EmbeddingSpec:
    """The spec of `model`; an unlisted model gets no prefixes (dimensions 0: unknown)."""
    name = model.lower().rsplit("/", 1)[-1]
    return KNOWN.get(name) or EmbeddingSpec(name, 0)
