"""The bundled chat models side by side (`python -m bench chat_models`): latency on a
three-passage question and answer quality on a dozen, each model with its own profile
(chat/turn.py PROFILES) and the product's prompt (chat/prompt.py).

Questions come from /work/shared/eval/python_faq.jsonl: each answer section is a passage,
with two other sections of the same FAQ page as the other two passages, the right one at a
seeded position; two general-knowledge questions get three unrelated passages (the answer
should say the documents do not cover it). Every model runs in its own `llm.local_server`
process, all loaded before the first request, and requests alternate between them, so a
machine shared with other work slows them alike. Measured per configuration (model x decode
threads; prompt threads 2): first-token latency (median and max over the first RUNS
questions: a repeated prompt would be served from llama.cpp's prompt cache), total time, decode tokens/s; per answer: cites a [Document N], cites the right
one, share of its 6-word runs copied from the passages (own words: under 0.5), what the
profile's guard (chat/answering.py) lets through, and the answer itself (read by eye).

BENCH_CHAT_MODELS="smollm2-135m:1,qwen2.5-0.5b:1" picks configurations (name:decode threads);
BENCH_CHAT_QUESTIONS caps the answerable questions, BENCH_CHAT_RUNS the latency runs.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

EVAL_FILE = Path(os.environ.get("GROUNDWORK_EVAL_DIR", "/work/shared/eval")) / "python_faq.jsonl"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIGS = "smollm2-135m:1,qwen2.5-0.5b:1,qwen2.5-0.5b:2,qwen2.5-1.5b:1"
RUNS = int(os.environ.get("BENCH_CHAT_RUNS", "5"))
# Three of 1,400 characters make a ~1,000-1,300-token prompt; BENCH_CHAT_PASSAGE_CHARS=800 is the
# product's CHUNK_SIZE. A profile with prompt_words reads them focused, as the product does.
PASSAGE_CHARS = int(os.environ.get("BENCH_CHAT_PASSAGE_CHARS") or 1400)
SEED = 23
UNANSWERABLE = ["What is the capital city of Australia?", "How many days of parental leave do employees get?"]


def _faq() -> list[dict]:
    return [json.loads(line) for line in EVAL_FILE.read_text().splitlines() if line.strip()]


def _passage(row: dict) -> SimpleNamespace:
    return SimpleNamespace(
        text=row["answer_section"][:PASSAGE_CHARS], document_name=row["document"], chunk_start=0, pages=None
    )


def cases(limit: int) -> list[dict]:
    """`limit` answerable questions (right passage at a seeded position among three) and the
    unanswerable ones, each {"question", "passages", "right": n or None}."""
    rows, rng = _faq(), random.Random(SEED)
    picked = rng.sample([r for r in rows if len(r["answer_section"]) > 400], limit)
    out = []
    for row in picked:
        others = [r for r in rows if r["document"] == row["document"] and r is not row] or rows
        passages = [_passage(r) for r in rng.sample(others, 2)]
        right = rng.randrange(3)
        passages.insert(right, _passage(row))
        out.append({"question": row["question"], "passages": passages, "right": right + 1})
    for question in UNANSWERABLE:
        out.append({"question": question, "passages": [_passage(r) for r in rng.sample(rows, 3)], "right": None})
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(name: str, gen_threads: int) -> dict:
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LOCAL_CHAT_MODEL": name}
    env.pop("LOCAL_CHAT_MODEL_PATH", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llm.local_server",
            "--port",
            str(port),
            "--threads",
            "2",
            "--gen-threads",
            str(gen_threads),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    return {"name": name, "gen_threads": gen_threads, "proc": proc, "base_url": f"http://127.0.0.1:{port}/v1"}


def wait_ready(server: dict, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server["proc"].poll() is not None:
            raise RuntimeError(f"{server['name']}: the local server exited with {server['proc'].returncode}")
        try:
            with urllib.request.urlopen(server["base_url"][:-3] + "/healthz", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"{server['name']}: not ready in {timeout} s")


def stop_server(server: dict) -> None:
    server["proc"].send_signal(signal.SIGTERM)
    try:
        server["proc"].wait(timeout=30)
    except subprocess.TimeoutExpired:
        server["proc"].kill()


def ask(server: dict, case: dict) -> dict:
    """One streamed answer with the model's profile: timings, usage and text."""
    from openai import OpenAI

    from chat.answering import focused
    from chat.prompt import build_messages
    from chat.turn import PROFILES
    from llm import bundled_models

    entry = bundled_models.model(server["name"])
    profile = PROFILES[entry.profile]
    passages = (
        focused(case["question"], case["passages"], profile.prompt_words) if profile.prompt_words else case["passages"]
    )
    messages = build_messages(
        question=case["question"], passages=passages, history=[], grounded=True, history_budget=0, style=profile.prompt
    )
    client = OpenAI(base_url=server["base_url"], api_key="local", max_retries=0, timeout=900)
    cpu_start, cpu_first = cpu_seconds(server), None
    started, first, deltas, usage = time.perf_counter(), None, [], None
    stream = client.chat.completions.create(
        model=entry.model_id,
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
        temperature=0.2,
        seed=SEED,
        max_tokens=profile.max_tokens,
        extra_body=profile.sampling or None,
    )
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                if first is None:
                    first, cpu_first = time.perf_counter(), cpu_seconds(server)
                deltas.append(choice.delta.content)
    total = time.perf_counter() - started
    first_s = (first or time.perf_counter()) - started
    decode = usage.completion_tokens / max(total - first_s, 1e-3) if usage else 0.0
    return {
        "first_token_s": round(first_s, 2),
        "total_s": round(total, 2),
        "decode_tok_s": round(decode, 1),
        "first_token_cpu_s": round((cpu_first or cpu_seconds(server)) - cpu_start, 2),
        "total_cpu_s": round(cpu_seconds(server) - cpu_start, 2),
        "prompt_tokens": usage.prompt_tokens if usage else None,
        "completion_tokens": usage.completion_tokens if usage else None,
        "deltas": deltas,
    }


def cpu_seconds(server: dict) -> float:
    """CPU seconds the server process has used (all threads): on a machine shared with other
    work, wall time says how busy the machine was; CPU time says what the model cost."""
    fields = Path(f"/proc/{server['proc'].pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def copied_share(answer: str, passages: list, n: int = 6) -> float:
    """Share of the answer's n-word runs found word for word in the passages."""
    words = _words(re.sub(r"\[Document \d+\]", " ", answer))
    runs = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not runs:
        return 0.0
    source = set()
    for passage in passages:
        pw = _words(passage.text)
        source.update(tuple(pw[i : i + n]) for i in range(len(pw) - n + 1))
    return round(sum(run in source for run in runs) / len(runs), 2)


def guarded(server: dict, case: dict, deltas: list[str]) -> str:
    """What the profile's guard releases of the streamed answer (chat/turn.py's settings)."""
    from chat import answering
    from chat.turn import PROFILES
    from llm import bundled_models

    profile = PROFILES[bundled_models.model(server["name"]).profile]
    guard = answering.Guard(
        case["passages"],
        strict=profile.strict,
        loop_words=4 if profile.strict else 8,
        by_sentence=profile.strict,
        max_sentences=profile.max_sentences,
        question=case["question"],
    )
    released = []
    for delta in deltas:
        released.append(guard.feed(delta))
        if guard.stopped:
            break
    else:
        released.append(guard.flush())
    return "".join(released) if guard.answered else ""


def judge(server: dict, case: dict, result: dict) -> dict:
    answer = "".join(result.pop("deltas"))
    cited = {int(n) for n in re.findall(r"\[Document (\d+)\]", answer)}
    kept = guarded(server, case, _deltas_of(answer))
    abstains = bool(
        re.search(
            r"(do not|don't|does not|doesn't|not) (say|contain|mention|provide|cover|answer)"
            r"|no information|not (in|found)",
            answer,
            re.I,
        )
    )
    return {
        **result,
        "question": case["question"],
        "right": case["right"],
        "cites": bool(cited),
        "cites_right": case["right"] in cited if case["right"] else None,
        "abstains": abstains,
        "copied": copied_share(answer, case["passages"]),
        "guard_kept_chars": len(kept),
        "answer": answer,
    }


def _deltas_of(answer: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", answer)


def summary(latency: list[dict], answers: list[dict]) -> dict:
    firsts = [r["first_token_s"] for r in latency]
    answerable = [a for a in answers if a["right"]]
    out = {
        "first_token_median_s": round(statistics.median(firsts), 2),
        "first_token_max_s": max(firsts),
        "first_token_cpu_median_s": round(statistics.median(r["first_token_cpu_s"] for r in latency), 2),
        "total_median_s": round(statistics.median(r["total_s"] for r in latency), 2),
        "total_cpu_median_s": round(statistics.median(r["total_cpu_s"] for r in latency), 2),
        "decode_tok_s_median": round(statistics.median(r["decode_tok_s"] for r in latency), 1),
        "prompt_tokens": latency[0]["prompt_tokens"],
    }
    if answers:
        out.update(
            {
                "questions": len(answerable),
                "cites": _share(a["cites"] for a in answerable),
                "cites_right": _share(a["cites_right"] for a in answerable),
                "own_words": _share(a["copied"] < 0.5 for a in answerable),
                "guard_kept": _share(a["guard_kept_chars"] > 0 for a in answerable),
                "unanswerable_abstained": _share(a["abstains"] for a in answers if not a["right"]),
                "answer_first_token_median_s": round(statistics.median(a["first_token_s"] for a in answers), 2),
            }
        )
    return out


def _share(flags) -> float:
    flags = list(flags)
    return round(sum(bool(f) for f in flags) / len(flags), 2) if flags else 0.0


def _configs() -> list[tuple[str, int]]:
    from llm import bundled_models

    configs = []
    for item in os.environ.get("BENCH_CHAT_MODELS", DEFAULT_CONFIGS).split(","):
        name, _, threads = item.strip().partition(":")
        try:
            bundled_models.part_path(bundled_models.model(name).parts[0])
        except bundled_models.BundledModelError:
            print(f"# {name}: not installed, skipped", file=sys.stderr)
            continue
        configs.append((name, int(threads or 1)))
    return configs


def run() -> dict:
    questions = cases(int(os.environ.get("BENCH_CHAT_QUESTIONS", "10")))
    servers = [start_server(name, threads) for name, threads in _configs()]
    try:
        for server in servers:
            wait_ready(server)
        return {
            "settings": f"prompt threads 2, temperature 0.2, seed {SEED}, {PASSAGE_CHARS}-char passages, "
            f"each model's profile; load average at start {os.getloadavg()[0]:.1f}",
            "results": _measure(servers, questions),
            "load_average_at_end": round(os.getloadavg()[0], 1),
        }
    finally:
        for server in servers:
            stop_server(server)


def _measure(servers: list[dict], questions: list[dict]) -> dict:
    """Each question asked of every configuration in turn (so the machine's load falls on all
    alike): a model's first configuration answers them all, the others (other thread counts)
    the first RUNS. Latency: the first RUNS answers, different prompts (llama.cpp would serve a
    repeated one from its prompt cache)."""
    answering = {}
    for server in servers:
        answering.setdefault(server["name"], server)
    asked = {id(s): [] for s in servers}
    for index, case in enumerate(questions):
        for server in servers:
            if index < RUNS or answering[server["name"]] is server:
                judged = judge(server, case, ask(server, case))
                asked[id(server)].append(judged)
                print(
                    json.dumps({"config": f"{server['name']}:{server['gen_threads']}", **judged}),
                    file=sys.stderr,
                    flush=True,
                )  # progress, on a machine where one answer can take minutes
    results = {}
    for server in servers:
        done = asked[id(server)]
        judged = done if answering[server["name"]] is server else []
        results[f"{server['name']} decode threads {server['gen_threads']}"] = {
            **summary(done[:RUNS], judged),
            "answers": judged,
        }
    return results


def prompt_cpu_seconds(name: str, questions: list[dict]) -> list[dict]:
    """CPU seconds llama.cpp spends evaluating each question's prompt (one generated token)
    with ONE prompt thread, in this process: with one thread nobody waits at a barrier, so this
    is the model's cost whatever else the machine runs (BENCH_CHAT_CPU=1). Two prompt threads on
    an idle 2-core machine take a little over half of it in wall time."""
    import resource

    from chat.prompt import build_messages
    from chat.turn import PROFILES
    from llm import bundled_models
    from llm.local_models import SmolChatEngine, default_gguf_path

    entry = bundled_models.model(name)
    engine = SmolChatEngine(model_path=default_gguf_path(name), threads=1, batch_threads=1)
    out = []
    for case in questions:
        messages = build_messages(
            question=case["question"],
            passages=case["passages"],
            history=[],
            grounded=True,
            history_budget=0,
            style=PROFILES[entry.profile].prompt,
        )
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        reply = engine.complete({"messages": messages, "max_tokens": 1, "temperature": 0})
        after = resource.getrusage(resource.RUSAGE_SELF)
        out.append(
            {
                "prompt_tokens": reply["usage"]["prompt_tokens"],
                "wall_s": round(time.perf_counter() - started, 2),
                "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
            }
        )
    engine.close()
    return out


if os.environ.get("BENCH_CHAT_CPU") and __name__ == "__main__":
    picked = cases(int(os.environ.get("BENCH_CHAT_QUESTIONS", "3")))
    for model_name in os.environ.get("BENCH_CHAT_MODELS", "smollm2-135m,qwen2.5-0.5b").split(","):
        print(
            json.dumps({"model": model_name, "runs": prompt_cpu_seconds(model_name.split(":")[0], picked)}), flush=True
        )
