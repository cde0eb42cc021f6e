"""How much full text should count when it and the vector list disagree (`python -m bench fusion_weight`).

retrieval/search/query.py fuses the vector and full-text lists by reciprocal rank; when the two
share no chunk among their first AGREEMENT_DEPTH, full text matched words, not meaning (a
German question's "Python" in English documents), and its ranks count DISJOINT_TEXT_WEIGHT.
This measures recall@3 (what the bundled profiles' model reads), recall@5 and MRR for several
weights, and vector alone, on the answer evaluation's corpora and accounts (bench/answer_eval.py;
EMBEDDING_MODEL picks the model, ANSWER_EVAL_CORPORA the corpora), over every first-turn
question of the answerable groups, each embedded once. No chat model is called.
"""

from __future__ import annotations

import os
import uuid

from bench.answer_corpora import BUILDERS, corpus_files
from bench.answer_eval import _account, ingest, load_questions
from bench.answer_scoring import passage_holds

GROUPS = ("as_written", "short", "what_is", "multilingual")
WEIGHTS = (1.0, 0.5, 0.25, 0.0)


def _ranks(account, questions: list[dict]) -> list[dict]:
    """Per question and configuration, the 1-based rank of the first right chunk (None: not in 10)."""
    from core.tenancy import account_context
    from retrieval.search import query as search

    out = []
    for item in questions:
        if item["group"] not in GROUPS or not item.get("expect"):
            continue
        with account_context(account):
            embedded = search.query_embed(account=account, query=item["question"], key=f"bench-fw-{uuid.uuid4().hex}")
            ranks = {}
            for weight in WEIGHTS:
                search.DISJOINT_TEXT_WEIGHT = weight
                hits = search.hybrid_search(
                    account=account,
                    query=item["question"],
                    query_vector=embedded.vector,
                    top_k=10,
                    embedding_model=embedded.model,
                )
                ranks[f"hybrid {weight}"] = next(
                    (i for i, h in enumerate(hits, 1) if passage_holds(h.document_name, h.text, item["expect"])), None
                )
            hits = search.hybrid_search(
                account=account,
                query=item["question"],
                query_vector=embedded.vector,
                top_k=10,
                embedding_model=embedded.model,
                mode="vector",
            )
            ranks["vector"] = next(
                (i for i, h in enumerate(hits, 1) if passage_holds(h.document_name, h.text, item["expect"])), None
            )
        out.append({"group": item["group"], "ranks": ranks})
    return out


def _summary(rows: list[dict]) -> dict:
    configs = list(rows[0]["ranks"]) if rows else []
    return {
        c: {
            "recall@3": round(sum(1 for r in rows if r["ranks"][c] and r["ranks"][c] <= 3) / len(rows), 3),
            "recall@5": round(sum(1 for r in rows if r["ranks"][c] and r["ranks"][c] <= 5) / len(rows), 3),
            "mrr": round(sum(1 / r["ranks"][c] for r in rows if r["ranks"][c]) / len(rows), 3),
        }
        for c in configs
    } | {"n": len(rows)}


def run(log=print) -> dict:
    from django.conf import settings

    from bench.ingestion import LocalModels
    from retrieval.search import query as search

    corpora = [c.strip() for c in (os.environ.get("ANSWER_EVAL_CORPORA") or ",".join(BUILDERS)).split(",") if c.strip()]
    chosen = search.DISJOINT_TEXT_WEIGHT
    rows = []
    try:
        with LocalModels() as local:
            settings.LLM_BASE_URL = os.environ.get("LLM_BASE_URL") or local.base_url
            for corpus in corpora:
                account, _user = _account(corpus)
                log(f"  {corpus}: {ingest(account, corpus_files(corpus))}", flush=True)
                rows += _ranks(account, load_questions(corpus))
    finally:
        search.DISJOINT_TEXT_WEIGHT = chosen
    return {
        "embedding_model": settings.EMBEDDING_MODEL,
        "corpora": corpora,
        "chosen_weight": chosen,
        "all": _summary(rows),
        **{g: _summary([r for r in rows if r["group"] == g]) for g in GROUPS},
    }
