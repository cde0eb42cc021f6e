"""Answer quality on several corpora: what a person gets, end to end, through the real chat turn.

Corpora (bench/answer_corpora.py builds them into .data/bench-cache/answer-eval/): python_faq,
octave_pdf (a long PDF manual with its contents and index pages), postgres_html (an HTML
manual), office (DOCX policy, XLSX, PPTX with notes, a scanned PNG, a CSV) and foreign (a German
and a Spanish document). Each corpus is ingested through the real pipeline into a bench
account of its own (one per corpus and embedding model, kept: a rerun only evaluates); then
each question runs as a real chat turn (`chat.driver.TurnRun.frames()`: route, hold, retrieve,
prompt, stream through the guard, settle), timed at its `chat.sources` frame and its first
`chat.token` with visible text.

Questions (bench/data/answer_eval/<corpus>.jsonl, and common.jsonl for every corpus), by group:
as_written, short (lower-case keywords), what_is, unanswerable, followup (two turns; some after
small talk), small_talk, general (general knowledge), multilingual (German, French, Spanish
questions; for `foreign` the English questions are the cross-language set). An answerable
question names its right passage (document + distinctive substrings; for the FAQ the answer
section of shared/eval's python_faq.jsonl). Scoring: bench/answer_scoring.py.

Environment: ANSWER_EVAL_CORPORA=office,foreign (a comma list; all by default);
ANSWER_EVAL_LIMIT=N (the first N questions of each group); ANSWER_EVAL_GROUPS=short,what_is;
ANSWER_EVAL_REINGEST=postgres_html (those corpora's documents deleted and ingested again, after a
parser change; "all");
ANSWER_EVAL_SEED (1; "none" for the product's unseeded sampling); ANSWER_EVAL_PROFILE='{"passages": 5}'
(overrides of the chat profile in use); ANSWER_EVAL_VERBOSE=1 prints every answer. The product's
own variables choose the models and pass through unchanged (LOCAL_CHAT_MODEL_PATH,
LOCAL_CHAT_MODEL, CHAT_PROFILE, EMBEDDING_MODEL, LLM_BASE_URL...). Every answer is written to
.data/bench-results/answer_eval-<time>.json; `--rescore FILE` judges such a file again with
today's judges and question files (recall@5 kept). `--feedback` replays down-voted questions
(`replay_feedback`: chat.MessageFeedback's down-voted answers, asked again in their accounts).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils.text import slugify

from bench import answer_scoring as scoring
from bench.answer_corpora import BUILDERS, corpus_files
from bench.common import percentile
from config.embedded import DATA_DIR

QUESTIONS = Path(__file__).resolve().parent / "data" / "answer_eval"
RESULTS = DATA_DIR / "bench-results"
EVAL_DIR = Path(os.environ.get("GROUNDWORK_EVAL_DIR", "/work/shared/eval"))
GROUPS = ["as_written", "short", "what_is", "unanswerable", "followup", "multilingual", "small_talk", "general"]
RATES = [
    "searched",
    "cited_hit",
    "recall@5",
    "support",
    "model_words",
    "completed",
    "degenerate",
    "garbage",
    "abstained",
    "abstained_ok",
    "glued",
]


def load_questions(corpus: str) -> list[dict]:
    """The corpus's questions and the common ones, the FAQ's answer sections resolved."""
    faq = [json.loads(line) for line in (EVAL_DIR / "python_faq.jsonl").read_text().splitlines() if line.strip()]
    items = []
    for name in (corpus, "common"):
        for line in (QUESTIONS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            expect = item.get("expect")
            if expect and "faq_row" in expect:
                item["expect"] = {"document": expect["document"], "span": faq[expect["faq_row"]]["answer_section"]}
            items.append(item)
    return items


def _account(corpus: str):
    from accounts.models import Account, User
    from accounts.services import account_create

    slug = slugify(f"bench-ae-{corpus}-{settings.EMBEDDING_MODEL}")[:60]
    email = f"{slug}@bench.test"
    account = Account.objects.filter(slug=slug).first()
    if account is None:
        owner = User.objects.create_user(email=email, password=None)
        account = account_create(name=f"answer eval {corpus}", owner=owner, slug=slug, initial_credits=100_000_000)
    return account, User.objects.get(email=email)


def reingested() -> set[str]:
    """ANSWER_EVAL_REINGEST=postgres_html,office: corpora whose documents are deleted and
    ingested again (after a parser change); "all" for every corpus."""
    chosen = {c.strip() for c in os.environ.get("ANSWER_EVAL_REINGEST", "").split(",") if c.strip()}
    return set(BUILDERS) if "all" in chosen else chosen


def ingest(account, files: list[Path], fresh: bool = False) -> dict:
    """Upload and ingest (in this process) every file not yet ready in the account (`fresh`:
    every file, the account's documents deleted first)."""
    from core.tenancy import account_context
    from documents import jobs
    from documents.kinds import KIND_BY_EXTENSION
    from documents.models import Document, Status
    from documents.services import document_upload

    if fresh:
        with account_context(account):
            Document.objects.for_account(account).delete()
    with account_context(account):
        ready = set(Document.objects.for_account(account).filter(status=Status.READY).values_list("name", flat=True))
    started = time.perf_counter()
    for path in (p for p in files if p.name not in ready):
        kind = KIND_BY_EXTENSION[path.suffix.lower()]
        with account_context(account):
            document, _ = document_upload(
                account=account,
                actor=None,
                upload=SimpleUploadedFile(path.name, path.read_bytes(), content_type=kind.content_type),
            )
        if document.status != Status.READY:
            jobs.ingest_document(account_id=account.pk, document_id=document.pk, revision=document.revision)
    with account_context(account):
        documents = Document.objects.for_account(account)
        return {
            "documents": documents.filter(status=Status.READY).count(),
            "failed": list(documents.filter(status=Status.FAILED).values_list("name", "error")),
            "chunks": sum(documents.values_list("chunk_count", flat=True)),
            "ingest_seconds_this_run": round(time.perf_counter() - started, 1),
        }


def unjudgeable(account, questions: list[dict]) -> list[str]:
    """Answerable questions whose right passage no chunk of the corpus holds (a question to fix)."""
    from core.tenancy import account_context
    from documents.models import Chunk

    with account_context(account):
        chunks = list(Chunk.objects.for_account(account).values_list("document__name", "content"))
    return [
        q["id"]
        for q in questions
        if q.get("expect") and not any(scoring.passage_holds(name, text, q["expect"]) for name, text in chunks)
    ]


def _ask(account, user, question: str, conversation_id=None) -> dict:
    """One real chat turn, frame by frame, as every surface relays it."""
    from billing.selectors import balance_get
    from chat.driver import TurnRun
    from core.tenancy import account_context

    with account_context(account):
        before = balance_get(account=account)
    run = TurnRun(account=account, user=user, question=question, conversation_id=conversation_id, surface="bench")
    started = time.perf_counter()
    sources_s = first_text_s = None
    for frame in run.frames():
        if frame["type"] == "chat.sources" and sources_s is None:
            sources_s = time.perf_counter() - started
        elif frame["type"] == "chat.token" and first_text_s is None and frame["text"].strip():
            first_text_s = time.perf_counter() - started
    elapsed = time.perf_counter() - started
    with account_context(account):
        after = balance_get(account=account)
    done, turn = run.done or {}, run.turn
    return {
        "question": question,
        "answer": done.get("answer", ""),
        "citations": done.get("citations", []),
        "finish_reason": done.get("finish_reason", ""),
        "error": getattr(run.error, "code", "") or "",
        "conversation_id": done.get("conversation_id"),
        "route": getattr(turn, "route", ""),
        "query": getattr(turn, "query", question) or "",
        "answered_by": getattr(turn, "answered_by", "") if turn else "",
        "searched": bool(turn) and bool(getattr(turn, "query", "")),
        "passages": [(p.document_name, p.text) for p in getattr(turn, "passages", [])],
        "sources_s": sources_s,
        "ttft_s": first_text_s,
        "seconds": elapsed,
        "credits": before - after,
        "completion_tokens": (done.get("usage") or {}).get("completion_tokens", 0),
    }


def recall_at_5(account, user, query: str, expect: dict) -> bool:
    """A right chunk among the product's top 5 for the query the turn searched with."""
    from core.tenancy import account_context
    from retrieval.search import search_for_query

    with account_context(account):
        hits = search_for_query(account=account, user=user, query=query, top_k=5, key=f"bench-ae-{uuid.uuid4().hex}")
    return any(scoring.passage_holds(h.document_name, h.text, expect) for h in hits)


def judge(result: dict, item: dict) -> dict:
    """Everything scored from the answer and its passages alone (no database: `rescore` reruns it)."""
    answer, expect, passages = result["answer"], item.get("expect"), [t for _, t in result["passages"]]
    cited = [
        result["passages"][c["n"] - 1] for c in result["citations"] if 0 < c.get("n", 0) <= len(result["passages"])
    ]
    grounding = " ".join(passages) + " " + item["question"] + " " + (item.get("first") or "")
    invented = scoring.invented_facts(answer, grounding, item.get("accept"))
    foreign = scoring.wrong_script(answer, item.get("lang", "en"), grounding)
    kind = scoring.degenerate_kind(answer, result["finish_reason"])
    out = {
        "searched": result["searched"],
        "degenerate": bool(kind),
        "degenerate_kind": kind,
        "garbage": bool(invented or foreign),
        "invented": invented,
        "wrong_script": foreign,
        "abstained": scoring.abstains(answer),
        "model_words": result["answered_by"] == "model",
        "completed": result["answered_by"] == "model+passages",
    }
    if expect:
        out["cited_hit"] = any(scoring.passage_holds(doc, text, expect) for doc, text in cited)
        out["support"] = round(scoring.support(answer, passages), 3)
    if item["group"] == "unanswerable":
        out["abstained_ok"] = scoring.abstained_correctly(answer, passages) and not out["garbage"]
    if item.get("first") and item["first"].lower().strip("!. ") in {"hi", "thanks", "hello", "ok"}:
        out["glued"] = bool(re.search(rf"\b{re.escape(item['first'].strip('!. '))}\b", result["query"], re.I))
    return out


def score(result: dict, item: dict, account, user) -> dict:
    out = judge(result, item)
    if item.get("expect"):
        out["recall@5"] = recall_at_5(account, user, result["query"] or item["question"], item["expect"])
    return out


def evaluate_questions(account, user, questions: list[dict], *, log=print) -> list[dict]:
    """Each question dict ({"question", "group", optional "first", "expect", "lang", "accept"})
    asked as a real turn (after its `first` turn in the same conversation) and scored. The
    hook `--feedback` replays down-voted questions through."""
    results = []
    for item in questions:
        first = _ask(account, user, item["first"]) if item.get("first") else None
        result = _ask(account, user, item["question"], first["conversation_id"] if first else None)
        result["scores"] = score(result, item, account, user)
        result |= {k: item.get(k) for k in ("id", "group", "lang", "first", "expect", "accept")}
        result["first_answer"] = first["answer"] if first else None
        result["first_credits"] = first["credits"] if first else 0
        results.append(result)
        if os.environ.get("ANSWER_EVAL_VERBOSE"):
            log(
                f"    [{item['group']}] {item['question']!r} ({result['answered_by']}): {result['answer'][:300]!r}",
                flush=True,
            )
    return results


def summarise(results: list[dict]) -> dict:
    def rate(key):
        values = [float(r["scores"][key]) for r in results if r["scores"].get(key) is not None]
        return round(sum(values) / len(values), 3) if values else None

    def pcts(key):
        values = [r[key] for r in results if r[key] is not None]
        return [round(statistics.median(values), 2), round(percentile(values, 90), 2)] if values else None

    out = {"n": len(results)} | {key: rate(key) for key in RATES}
    return out | {
        "errors": sum(1 for r in results if r["error"]),
        "first_text_s": pcts("ttft_s"),
        "sources_s": pcts("sources_s"),
        "seconds": pcts("seconds"),
        "median_credits": statistics.median(r["credits"] for r in results),
    }


def table(report: dict) -> str:
    """The corpus x group table docs/benchmarks.md shows (p50/p90 times in seconds)."""
    columns = [
        "n",
        "cited_hit",
        "recall@5",
        "support",
        "model_words",
        "degenerate",
        "garbage",
        "abstained",
        "abstained_ok",
        "first_text_s",
        "sources_s",
        "seconds",
    ]
    lines = ["| corpus | group | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 2)]
    for corpus, groups in report.items():
        for group, row in groups.items():
            cells = [
                (
                    "—"
                    if row.get(c) is None
                    else "/".join(f"{v:.2f}" for v in row[c])
                    if isinstance(row[c], list)
                    else f"{row[c]:.2f}"
                    if isinstance(row[c], float)
                    else str(row[c])
                )
                for c in columns
            ]
            lines.append(f"| {corpus} | {group} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _chosen_groups(questions: list[dict], limit: int | None) -> list[dict]:
    only = set(filter(None, os.environ.get("ANSWER_EVAL_GROUPS", "").split(",")))
    picked = []
    for group in GROUPS:
        if only and group not in only:
            continue
        picked += [q for q in questions if q["group"] == group][: limit or None]
    return picked


def _profile() -> str:
    """The chat profile in use, with ANSWER_EVAL_PROFILE's overrides and the sampling seed."""
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


def feedback_questions() -> list[dict]:
    """Down-voted answers (chat.selectors.feedback_regression_cases, every account's) as
    question dicts for `evaluate_questions`: the question, its conversation's previous question
    as `first`, the answer that was voted down and the voter's comment kept to compare."""
    from chat.selectors import feedback_regression_cases

    return [
        {
            "id": f"feedback-{case['message_id']}",
            "group": "feedback",
            "question": case["question"],
            "first": case["previous_question"] or None,
            "account_id": case["account_id"],
            "voted_answer": case["answer"],
            "comment": case["comment"],
        }
        for case in feedback_regression_cases()
        if case["question"]
    ]


def replay_feedback(log=print) -> dict:
    """`--feedback`: every down-voted question asked again in its own account (as the account's
    first owner), judged with the judges that need no expectations (degenerate, garbage,
    abstained), next to the answer that was voted down. Each replay's charge is granted back
    (reason "answer_eval --feedback replay"), so the account's balance is as it was. Feedback
    lives in the product's database: point the bench at it with BENCH_DATABASE."""
    from accounts.models import Account, Membership, Role
    from billing.services import credits_grant
    from core.tenancy import account_context

    questions, replayed = feedback_questions(), []
    log(f"  {len(questions)} down-voted answers to replay", flush=True)
    for item in questions:
        account = Account.objects.get(pk=item["account_id"])
        with account_context(account):
            owner = Membership.objects.for_account(account).filter(role=Role.OWNER).order_by("pk").first()
        if owner is None:
            continue
        result = evaluate_questions(account, owner.user, [item], log=log)[0]
        spent = result["credits"] + (result.get("first_credits") or 0)
        if spent > 0:
            with account_context(account):
                credits_grant(
                    account=account,
                    amount=spent,
                    reason="answer_eval --feedback replay",
                    key=f"bench-feedback-replay:{item['id']}:{time.time_ns()}",
                )
        replayed.append(result | {"voted_answer": item["voted_answer"], "comment": item["comment"]})
        log(
            f"    {item['question']!r}\n      voted down: {item['voted_answer'][:200]!r}\n"
            f"      now:        {result['answer'][:200]!r}\n      scores: {json.dumps(result['scores'])}",
            flush=True,
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"answer_eval-feedback-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(
        json.dumps(
            {"answers": replayed, "summary": summarise(replayed) if replayed else {}}, indent=1, ensure_ascii=False
        )
    )
    return {"replayed": len(replayed), "summary": summarise(replayed) if replayed else {}, "answers_file": str(out)}


def _settings(limit) -> str:
    passed = {
        k: os.environ[k]
        for k in (
            "LOCAL_CHAT_MODEL",
            "LOCAL_CHAT_MODEL_PATH",
            "CHAT_PROFILE",
            "EMBEDDING_MODEL",
            "LLM_BASE_URL",
            "ANSWER_EVAL_PROFILE",
        )
        if os.environ.get(k)
    }
    return (
        f"chat model {settings.CHAT_MODEL}; embedding {settings.EMBEDDING_MODEL}; env {passed or 'defaults'}; "
        f"CHAT_MAX_TOKENS={settings.CHAT_MAX_TOKENS}; RAG_TOP_K={settings.RAG_TOP_K}; "
        f"threshold={settings.RAG_MATCH_THRESHOLD}; CHUNK_SIZE={settings.CHUNK_SIZE}; limit per group={limit or 'none'}"
    )


def _warm_up(log) -> None:
    """One untimed general question first: the chat model's first call loads it (28-43 s here),
    which would otherwise be counted against the first question asked."""
    account, user = _account("warm-up")
    started = time.perf_counter()
    _ask(account, user, "Say hello in one short sentence.")
    log(f"  warm-up turn: {time.perf_counter() - started:.1f}s", flush=True)


def _run_corpora(corpora: list[str], limit: int | None, about: dict, log) -> tuple[dict, Path]:
    """Each corpus in turn; the results file is rewritten after each, so a run stopped part way
    keeps what it measured."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"answer_eval-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    report, answers = {}, []
    for corpus in corpora:
        account, user = _account(corpus)
        questions = load_questions(corpus)
        about["corpora"][corpus] = ingest(account, corpus_files(corpus), fresh=corpus in reingested()) | {
            "questions": len(questions),
            "unjudgeable": unjudgeable(account, questions),
        }
        log(f"  {corpus}: {json.dumps(about['corpora'][corpus])}", flush=True)
        results = evaluate_questions(account, user, _chosen_groups(questions, limit), log=log)
        answers += [r | {"corpus": corpus} for r in results]
        report[corpus] = {
            g: summarise([r for r in results if r["group"] == g])
            for g in GROUPS
            if any(r["group"] == g for r in results)
        }
        for group, row in report[corpus].items():
            log(f"  {corpus}/{group}: {json.dumps(row)}", flush=True)
        out.write_text(json.dumps(about | {"groups": report, "answers": answers}, indent=1, ensure_ascii=False))
    return report, out


def rescore(path: Path, log=print) -> dict:
    """Re-judge a results file with today's judges and question files (recall@5 is kept: it
    needs the database). Writes <name>-rescored.json next to it."""
    data = json.loads(Path(path).read_text())
    items = {q["id"]: q for corpus in {a["corpus"] for a in data["answers"]} for q in load_questions(corpus)}
    for answer in data["answers"]:
        recall = answer["scores"].get("recall@5")
        answer["scores"] = judge(answer, items[answer["id"]]) | ({"recall@5": recall} if recall is not None else {})
    corpora = list(dict.fromkeys(a["corpus"] for a in data["answers"]))
    data["groups"] = {
        c: {
            g: summarise([a for a in data["answers"] if a["corpus"] == c and a["group"] == g])
            for g in GROUPS
            if any(a["corpus"] == c and a["group"] == g for a in data["answers"])
        }
        for c in corpora
    }
    out = Path(path).with_name(Path(path).stem + "-rescored.json")
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    log(table(data["groups"]))
    return {"groups": data["groups"], "answers_file": str(out)}


def run(log=print) -> dict:
    from bench.ingestion import LocalModels

    if "--rescore" in sys.argv:
        return rescore(Path(sys.argv[sys.argv.index("--rescore") + 1]), log)
    limit = int(os.environ.get("ANSWER_EVAL_LIMIT") or 0) or None
    corpora = [c.strip() for c in (os.environ.get("ANSWER_EVAL_CORPORA") or ",".join(BUILDERS)).split(",") if c.strip()]
    unknown = [c for c in corpora if c not in BUILDERS]
    if unknown:
        raise SystemExit(f"ANSWER_EVAL_CORPORA: unknown corpus {unknown}; known: {', '.join(BUILDERS)}")
    settings.CHAT_RATE_PER_USER = settings.CHAT_RATE_PER_ACCOUNT = "100000/min"
    started = time.perf_counter()
    with LocalModels() as local:
        settings.LLM_BASE_URL = os.environ.get("LLM_BASE_URL") or local.base_url
        if "--feedback" in sys.argv:
            return replay_feedback(log)
        about = {"settings": _settings(limit) + f"; {_profile()}", "corpora": {}}
        _warm_up(log)
        report, out = _run_corpora(corpora, limit, about, log)
    log(table(report), flush=True)
    return about | {"seconds": round(time.perf_counter() - started), "groups": report, "answers_file": str(out)}
