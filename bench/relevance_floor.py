"""Where the bundled relevance floor belongs for an embedding model (`python -m bench relevance_floor`).

A chat turn on the bundled models answers from the documents only when its retrieved text is
near enough (chat/answering.py `relevance`: the best vector similarity plus a weight x the best
passage's coverage of the question's words); otherwise it says "Your documents don't cover
this." Each embedding model has its own scale of similarities (all-MiniLM-L6-v2's unrelated
pairs sit near 0.1-0.3, multilingual-e5-small's near 0.7-0.8), so the floor is a property of
the model (llm/embedding_specs.py `EmbeddingSpec.relevance_floor` and `coverage_weight`), calibrated here.

On the answer evaluation's corpora and questions (bench/answer_eval.py: same accounts, one per
corpus and embedding model, ingested once), with no chat model call: every first-turn question
of the answerable groups (as_written, short, what_is, multilingual) and of the groups the
documents do not answer (unanswerable, general) is searched as a turn searches it, and its
relevance recorded (its best similarity and coverage, weighted by the model's coverage_weight,
and also with the similarity alone and with MiniLM's weight 0.35). Reported: each group's relevance quantiles, and for each candidate floor
the share of answerable questions (whose right passage was retrieved) that pass it and the
share of the others that it stops; `suggested` is the highest floor that lets >= 0.9 of the
answerable questions through (the one right passage found must not be thrown away), with what
it stops. EMBEDDING_MODEL picks the model (the product's variable); ANSWER_EVAL_CORPORA the corpora.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid

from bench.answer_corpora import BUILDERS, corpus_files
from bench.answer_eval import _account, ingest, load_questions
from bench.answer_scoring import passage_holds

ANSWERABLE = ("as_written", "short", "what_is", "multilingual")
NOT_COVERED = ("unanswerable", "general")
KEEP_ANSWERABLE = 0.9


def measure(account, questions: list[dict]) -> list[dict]:
    """Each question's relevance as the turn computes it (chat.retrieve.turn_passages)."""
    from chat import answering
    from core.tenancy import account_context
    from retrieval.search import expand_passages, query_search

    rows = []
    for item in questions:
        if item["group"] not in ANSWERABLE + NOT_COVERED or item.get("followup") or item.get("turns"):
            continue
        with account_context(account):
            found = query_search(account=account, query=item["question"], key=f"bench-rf-{uuid.uuid4().hex}")
            passages = expand_passages(account=account, hits=found.hits)
        expect = item.get("expect")
        rows.append(
            {
                "group": item["group"],
                "question": item["question"],
                "similarity": max((h.similarity or 0.0 for h in found.hits), default=0.0),
                "coverage": max((answering.coverage(item["question"], p.text) for p in passages), default=0.0),
                "found_right": bool(expect) and any(passage_holds(p.document_name, p.text, expect) for p in passages),
            }
        )
    return rows


def with_weight(rows: list[dict], weight: float) -> list[dict]:
    return [r | {"relevance": r["similarity"] + weight * r["coverage"] if r["similarity"] else 0.0} for r in rows]


def sweep(rows: list[dict]) -> dict:
    """For floors 0.30-1.40: answerable-with-right-passage kept, not-covered stopped."""
    kept_pool = [r["relevance"] for r in rows if r["group"] in ANSWERABLE and r["found_right"]]
    stop_pool = [r["relevance"] for r in rows if r["group"] in NOT_COVERED]
    table, suggested = [], None
    for step in range(30, 141, 2):
        floor = step / 100
        kept = sum(v >= floor for v in kept_pool) / (len(kept_pool) or 1)
        stopped = sum(v < floor for v in stop_pool) / (len(stop_pool) or 1)
        table.append({"floor": floor, "answerable_kept": round(kept, 3), "not_covered_stopped": round(stopped, 3)})
        if kept >= KEEP_ANSWERABLE:
            suggested = table[-1]
    return {
        "answerable_with_right_passage": len(kept_pool),
        "not_covered": len(stop_pool),
        "suggested": suggested,
        "sweep": table,
    }


def _quantiles(values: list[float]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)
    pick = lambda q: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)  # noqa: E731
    return {
        "n": len(values),
        "min": round(ordered[0], 3),
        "p10": pick(0.1),
        "median": round(statistics.median(values), 3),
        "p90": pick(0.9),
        "max": round(ordered[-1], 3),
    }


def run(log=print) -> dict:
    from django.conf import settings

    from bench.ingestion import LocalModels

    corpora = [c.strip() for c in (os.environ.get("ANSWER_EVAL_CORPORA") or ",".join(BUILDERS)).split(",") if c.strip()]
    rows = []
    with LocalModels() as local:
        settings.LLM_BASE_URL = os.environ.get("LLM_BASE_URL") or local.base_url
        for corpus in corpora:
            account, _user = _account(corpus)
            log(f"  {corpus}: {ingest(account, corpus_files(corpus))}", flush=True)
            rows += [r | {"corpus": corpus} for r in measure(account, load_questions(corpus))]
    from chat.retrieve import relevance_rule

    floor, weight = relevance_rule(settings.EMBEDDING_MODEL)
    rows = with_weight(rows, weight)
    groups = {g: _quantiles([r["relevance"] for r in rows if r["group"] == g]) for g in ANSWERABLE + NOT_COVERED}
    by_corpus = {c: sweep([r for r in rows if r["corpus"] == c])["suggested"] for c in corpora}
    at_floor = {
        g: round(
            sum(
                (r["relevance"] >= floor) == (g in ANSWERABLE)
                for r in rows
                if r["group"] == g and (r["found_right"] or g in NOT_COVERED)
            )
            / (sum(1 for r in rows if r["group"] == g and (r["found_right"] or g in NOT_COVERED)) or 1),
            3,
        )
        for g in ANSWERABLE + NOT_COVERED
    }
    result = {
        "embedding_model": settings.EMBEDDING_MODEL,
        "floor": floor,
        "coverage_weight": weight,
        "right_at_floor_by_group": at_floor,
        "relevance_by_group": groups,
        "suggested_by_corpus": by_corpus,
        "other_weights": {w: sweep(with_weight(rows, w))["suggested"] for w in (0.0, 0.35) if w != weight},
    } | sweep(rows)
    from bench.answer_eval import RESULTS

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"relevance_floor-{settings.EMBEDDING_MODEL}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(result | {"rows": rows}, indent=1, ensure_ascii=False))
    result["sweep"] = result["sweep"][::2]
    return result | {"rows_file": str(out)}
