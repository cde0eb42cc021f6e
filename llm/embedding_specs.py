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

    def prefixed(self, texts: list[str], purpose: Purpose) -> list[str]:
        prefix = self.query_prefix if purpose == Purpose.QUERY else self.passage_prefix
        return [prefix + t for t in texts] if prefix else list(texts)


KNOWN = {
    spec.name: spec for spec in (
        EmbeddingSpec("all-minilm-l6-v2", 384),
        EmbeddingSpec("multilingual-e5-small", 384, query_prefix="query: ", passage_prefix="passage: "),
        EmbeddingSpec("multilingual-e5-base", 768, query_prefix="query: ", passage_prefix="passage: "),
        EmbeddingSpec("multilingual-e5-large", 1024, query_prefix="query: ", passage_prefix="passage: "),
    )
}


def embedding_spec(model: str) -> EmbeddingSpec:
    """The spec of `model`; an unlisted model gets no prefixes (dimensions 0: unknown)."""
    name = model.lower().rsplit("/", 1)[-1]
    return KNOWN.get(name) or EmbeddingSpec(name, 0)
