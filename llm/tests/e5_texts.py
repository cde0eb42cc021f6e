"""Real texts for comparing e5 engines: the repository's own documents chunked as ingestion
chunks them (documents.chunking, the default 800/200 characters, the embedding text with
its title line), and real questions in several languages from the bench's data sets."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

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
