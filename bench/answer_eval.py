"""Answer quality: what a person gets, end to end, through the real chat service.

The Python 3.11 FAQ files (`../shared/eval`) are ingested into one bench account with the
bundled local models; then each question runs as a real chat turn (`chat.driver.TurnRun`:
route, hold, retrieve, prompt, stream, settle) against the bundled chat model, or whatever
LLM_BASE_URL / LOCAL_CHAT_MODEL_PATH names. Question groups (bench/data/answer_eval.json):

- faq: a stride sample of the FAQ questions as written;
- short: the same questions rewritten as "What is …?" / "How do I …?";
- unanswerable: questions the FAQ does not answer;
- followup: the second question of a two-turn conversation ("And on Windows?"), scored
  against the FAQ row it stands for; followup_standalone: that row's question asked alone;
- small_talk: greetings and general questions.

Per group: searched (the documents were searched), retrieved (the answer was given document
chunks: the search found passages near enough to answer from), cited_hit (a cited chunk holds
the answer section: same file and a shared 60-character span), citation_precision (cited
chunks that hold it / cited chunks), support (share of the answer's content words found in
the answer section), abstained (unanswerable: says the documents do not cover it and cites
nothing), degenerate (a 4-word run repeated 3 times, or cut at the token cap), time to first
token, credits per answer (balance before minus after: query embedding + chat),
model_answers (the share answered in the model's words rather than the passages' own) and
completed_answers (the model's first sentence followed by its passage's own sentences).

ANSWER_EVAL_LIMIT=N runs the first N questions of each group (a quick look);
ANSWER_EVAL_GROUPS=faq,short runs only those groups; ANSWER_EVAL_PROFILE='{"max_tokens": 300}'
measures a variant of the chat profile in use (CHAT_PROFILE picks the profile);
ANSWER_EVAL_VERBOSE=1 prints every question's answer; ANSWER_EVAL_SEED (1 by default; "none" for the product's unseeded sampling) fixes the chat
model's sampling seed, so two commits are compared on the same draws: unseeded, one run's
faq model_answers moved between 0 and 0.25 at one commit (docs/benchmarks.md, Answers).
"""
from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections import Counter
from pathlib import Path

from django.conf import settings

from bench.retrieval_eval import CORPUS_DIR, EVAL_DIR, _corpus, _ingest, _norm, _relevant, _upload_name

DATA = Path(__file__).resolve().parent / "data" / "answer_eval.json"
ACCOUNT_SLUG = "bench-answer-eval"
ABSTAIN = re.compile(
    r"(documents?|chunks?|sources?|provided (?:text|context)|context)\s+(?:you\s+(?:gave|provided)\s+)?"
    r"(?:do(?:es)?\s*n[o']t|did\s*n[o']t|don't|doesn't)\s+(?:say|cover|mention|contain|include|address|answer|"
    r"specify|provide|discuss)|not\s+(?:covered|mentioned|found|addressed|answered)\s+(?:in|by)\s+(?:the|your)|"
    r"no information|could\s*n[o']t find|could not find|can(?:no|')t find|not in the (?:team'?s )?documents",
    re.I)
STOPWORDS = set("""a an the and or but if then else of to in on at by for with from as is are was were be been
being it its this that these those there here which who whom whose what when where why how do does did done not
no yes can could should would will shall may might must you your yours we our ours they their them he she his her
i me my mine so such than too very just also only into out up down over under about above below again further
once all any both each few more most other some same own nor document documents chunk chunks""".split())


def _account():
    from accounts.models import Account, User
    from accounts.services import account_create

    email = f"{ACCOUNT_SLUG}@bench.test"
    account = Account.objects.filter(slug=ACCOUNT_SLUG).first()
    if account is None:
        owner = User.objects.create_user(email=email, password=None)
        account = account_create(name="answer eval", owner=owner, slug=ACCOUNT_SLUG, initial_credits=100_000_000)
    return account, User.objects.get(email=email)


def content_words(text: str) -> list[str]:
    text = re.sub(r"\[Document\s+\d+\]", " ", text, flags=re.I)
    return [w for w in re.findall(r"[a-z][a-z0-9_']+", text.lower()) if len(w) > 2 and w not in STOPWORDS]


def degenerate(answer: str, finish_reason: str) -> bool:
    words = re.sub(r"\[Document\s+\d+\]", " ", answer, flags=re.I).lower().split()
    grams = Counter(tuple(words[i:i + 4]) for i in range(len(words) - 3))
    return finish_reason == "length" or any(count >= 3 for count in grams.values())


def _ask(account, user, question: str, conversation_id=None) -> dict:
    from billing.selectors import balance_get
    from chat.driver import TurnRun
    from core.tenancy import account_context

    with account_context(account):
        before = balance_get(account=account)
    run = TurnRun(account=account, user=user, question=question, conversation_id=conversation_id)
    started, asked = time.perf_counter(), time.monotonic()
    try:
        done = run.run()
        error = ""
    except Exception as exc:  # a failed turn is a result too (e.g. provider_unavailable)
        done, error = {}, getattr(exc, "code", type(exc).__name__)
    elapsed = time.perf_counter() - started
    with account_context(account):
        after = balance_get(account=account)
    turn = run.turn
    return {"question": question, "answer": done.get("answer", ""), "citations": done.get("citations", []),
            "finish_reason": done.get("finish_reason", ""), "error": error,
            "conversation_id": done.get("conversation_id"),
            "route": getattr(turn, "route", ""), "query": getattr(turn, "query", question),
            # Searched the documents at all (older code had no query: it searched unless routed general).
            "answered_by": getattr(turn, "answered_by", "model") if turn else "",
            "searched": bool(turn) and (bool(turn.query) if hasattr(turn, "query") else turn.route != "general"),
            "passages": [(p.document_name, p.text) for p in getattr(turn, "passages", [])],
            # From the question to the first text a person sees (retrieval included).
            "ttft_s": (turn.first_token_at - asked) if turn and turn.first_token_at else None,
            "seconds": elapsed, "credits": before - after,
            "completion_tokens": (done.get("usage") or {}).get("completion_tokens", 0)}


def _score(result: dict, row: dict | None) -> dict:
    cited = [result["passages"][c["n"] - 1] for c in result["citations"] if 0 < c["n"] <= len(result["passages"])]
    scores = {"searched": result["searched"], "retrieved": bool(result["passages"]), "degenerate": degenerate(result["answer"], result["finish_reason"]),
              "cited_any": bool(cited), "abstained": bool(ABSTAIN.search(result["answer"])) and not cited}
    if row is not None:
        answer_section = _norm(row["answer_section"])
        name = _upload_name(CORPUS_DIR / row["document"])
        hits = [name == doc and _relevant(text, answer_section) for doc, text in cited]
        scores["cited_hit"] = any(hits)
        scores["citation_precision"] = sum(hits) / len(hits) if hits else None
        words = content_words(result["answer"])
        section = set(content_words(row["answer_section"]))
        scores["support"] = sum(w in section for w in words) / len(words) if words else 0.0
    return scores


def _summary(results: list[dict]) -> dict:
    def rate(key):
        values = [r["scores"][key] for r in results if r["scores"].get(key) is not None]
        return round(sum(values) / len(values), 3) if values else None

    ttft = [r["ttft_s"] for r in results if r["ttft_s"] is not None]
    out = {"n": len(results)}
    for key in ("searched", "retrieved", "cited_hit", "citation_precision", "support", "abstained", "degenerate"):
        value = rate(key)
        if value is not None:
            out[key] = value
    out |= {"model_answers": round(sum(r["answered_by"] == "model" for r in results) / len(results), 3),
            # The model's first sentence, completed with its passage's own (chat.turn.ChatTurn.stream).
            "completed_answers": round(sum(r["answered_by"] == "model+passages" for r in results) / len(results), 3),
            "errors": sum(1 for r in results if r["error"]),
            "median_ttft_s": round(statistics.median(ttft), 2) if ttft else None,
            "median_seconds": round(statistics.median(r["seconds"] for r in results), 2),
            "median_credits": statistics.median(r["credits"] for r in results),
            "max_credits": max(r["credits"] for r in results),
            "median_completion_tokens": statistics.median(r["completion_tokens"] for r in results)}
    return out


def _groups(sets: dict, rows: list[dict], limit: int | None):
    def take(items):
        return items[:limit] if limit else items

    faq = take(sets["faq_sample"])
    yield "faq", [(rows[i]["question"], rows[i], None) for i in faq]
    yield "short", [(s["question"], rows[s["row"]], None) for s in take(sets["short_forms"])]
    yield "unanswerable", [(q, None, None) for q in take(sets["unanswerable"])]
    pairs = take(sets["two_turn"])
    yield "followup", [(p["followup"], rows[p["row"]], p["first"]) for p in pairs]
    yield "followup_standalone", [(rows[p["row"]]["question"], rows[p["row"]], None) for p in pairs]
    small = sets["small_talk"]
    yield "small_talk", [(q, None, None) for q in take(small["greetings"]) + take(small["general"])]


def evaluate(account, user, limit: int | None = None, *, log=print) -> dict:
    rows = [json.loads(line) for line in (EVAL_DIR / "python_faq.jsonl").read_text().splitlines() if line.strip()]
    sets = json.loads(DATA.read_text())
    report, examples = {}, {}
    only = set(filter(None, os.environ.get("ANSWER_EVAL_GROUPS", "").split(",")))
    for group, items in _groups(sets, rows, limit):
        if only and group not in only:
            continue
        results = []
        for question, row, first in items:
            conversation_id = _ask(account, user, first)["conversation_id"] if first else None
            result = _ask(account, user, question, conversation_id)
            result["scores"] = _score(result, row)
            results.append(result)
            if os.environ.get("ANSWER_EVAL_VERBOSE"):
                log(f"    [{group}] {question!r} ({result['answered_by']}, support "
                    f"{result['scores'].get('support')}): {result['answer']!r}", flush=True)
        report[group] = _summary(results)
        examples[group] = [{k: r[k] for k in ("question", "query", "route", "answer", "finish_reason", "credits")}
                           | {"cited": [c["n"] for c in r["citations"]]} for r in results[:2]]
        log(f"  {group}: {json.dumps(report[group])}", flush=True)
    return {"groups": report, "examples": examples}


def _profile() -> str:
    """The chat profile in use, with ANSWER_EVAL_PROFILE's JSON overrides applied (a variant
    to measure, e.g. '{"sampling": {}}' or '{"passages": 5}')."""
    import dataclasses

    from chat import turn

    chosen = turn.profile()
    override = json.loads(os.environ.get("ANSWER_EVAL_PROFILE") or "{}")
    seed = os.environ.get("ANSWER_EVAL_SEED", "1").strip().lower()
    if seed not in ("", "none"):
        override["sampling"] = {**override.get("sampling", chosen.sampling), "seed": int(seed)}
    if override:
        turn.PROFILES[chosen.name] = chosen = dataclasses.replace(chosen, **override)
    return repr(chosen)


def run() -> dict:
    from bench.ingestion import LocalModels

    limit = int(os.environ.get("ANSWER_EVAL_LIMIT") or 0) or None
    files = [p for p in _corpus() if p.parent.name == "faq"]
    account, user = _account()
    settings.CHAT_RATE_PER_USER = settings.CHAT_RATE_PER_ACCOUNT = "100000/min"
    with LocalModels() as local:
        settings.LLM_BASE_URL = local.base_url
        chosen = _profile()
        corpus = _ingest(account, files)
        started = time.perf_counter()
        results = evaluate(account, user, limit)
    return {
        "corpus": {"files": len(files), **corpus},
        **results,
        "seconds": round(time.perf_counter() - started),
        "settings": f"chat model {settings.CHAT_MODEL} ({os.environ.get('LOCAL_CHAT_MODEL_PATH') or 'bundled GGUF'}, "
                    f"local llama.cpp); CHAT_MAX_TOKENS={settings.CHAT_MAX_TOKENS}; RAG_TOP_K={settings.RAG_TOP_K}; "
                    f"threshold={settings.RAG_MATCH_THRESHOLD}; CHUNK_SIZE={settings.CHUNK_SIZE}; "
                    f"limit per group={limit or 'none'}; {chosen}",
    }
