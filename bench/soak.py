"""A soak: a bounded mixed load for SOAK_SECONDS (1800) against 2 web (daphne) processes and 2
rq workers on the bench database, with the fake OpenAI-style model server (zero latency): a few
client threads (SOAK_CLIENTS, 4) each pick one of SOAK_ACCOUNTS (5) accounts at random, each with
its own API key, and do an upload via REST (1 in 5; 1 upload in 8 of those a broken PDF, which
must end `failed` with a reason), a search via REST (2 in 5) or a chat turn over the websocket
(2 in 5), then wait SOAK_THINK_SECONDS (0.5): a bounded load, not a flood.

Every SOAK_SAMPLE_SECONDS (30) it samples the RSS of every process it started (psutil; a
worker's with its work horse), the PostgreSQL connections (pg_stat_activity: the bench
database's, and the server's in all), and per operation the p50/p95 latency and the errors of
that window.

At the end, with the load stopped and the ingestion queue drained, `reconcile` checks the
ledger against what was used: every chat debit matched to its message's provider tokens, every
document's embedding debits to that revision's provider tokens, every query-embedding debit to
a search request or a chat turn's hold, each debit's credits = its tokens at 1:1 pricing (the
minimum of one credit a call), no hold left open and every credit held given back, every
document ready or failed with a reason, and each balance = the sum of its ledger deltas. Any
failed check: the report says "reconciliation failed" and `python -m bench soak` exits 1.
Every process started here is stopped at the end, also on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict

from bench.chat_ws import _free_port, _wait
from config.embedded import BASE_DIR

OPERATIONS = ("upload", "search", "chat")
WEIGHTS = (1, 2, 2)
WORDS = [
    "leave",
    "holiday",
    "expenses",
    "receipts",
    "travel",
    "laptop",
    "security",
    "badge",
    "office",
    "payroll",
    "pension",
    "team",
    "lead",
    "manager",
    "approval",
    "policy",
    "request",
    "week",
    "month",
    "year",
    "remote",
    "onboarding",
    "training",
    "budget",
    "invoice",
    "contract",
    "vendor",
    "customer",
    "support",
    "release",
]


def _settings() -> dict:
    return {
        "seconds": float(os.environ.get("SOAK_SECONDS", "1800")),
        "accounts": int(os.environ.get("SOAK_ACCOUNTS", "5")),
        "clients": int(os.environ.get("SOAK_CLIENTS", "4")),
        "think_s": float(os.environ.get("SOAK_THINK_SECONDS", "0.5")),
        "sample_s": float(os.environ.get("SOAK_SAMPLE_SECONDS", "30")),
    }


# --- reconciliation ------------------------------------------------------------------------


def _one_to_one(entry) -> bool:
    return -entry.delta == max(1, entry.tokens) and entry.shortfall == 0


def reconcile(account_ids: list[int], *, searches: dict[int, int] | None = None) -> dict:
    """The ledger of each account against its usage rows; `searches`: the REST searches each
    account made that were answered 200 (None: not checked). Returns counts and `failures`
    (each a sentence naming the account and the row), `ok` when there are none."""
    from billing import references
    from billing.models import AccountBalance, CreditHold, HoldStatus
    from billing.selectors import ledger_list
    from chat.models import Message
    from core.tenancy import account_context
    from documents.models import Document, Status

    failures: list[str] = []
    totals: dict[str, int] = defaultdict(int)
    for account_id in account_ids:
        with account_context(account_id=account_id):
            entries = list(ledger_list(account=account_id).order_by("pk"))
            messages = {m.pk: m for m in Message.objects.for_account(account_id).filter(role="assistant")}
            documents = {d.pk: d for d in Document.objects.for_account(account_id)}
            holds = {h.key: h for h in CreditHold.objects.for_account(account_id)}
            balance = AccountBalance.objects.for_account(account_id).get(account_id=account_id).balance
        where = f"account {account_id}"
        # Balance = the sum of the ledger's deltas.
        if balance != sum(e.delta for e in entries):
            failures.append(f"{where}: balance {balance} ≠ sum of ledger deltas {sum(e.delta for e in entries)}")
        # Holds: none open, and every credit held given back (hold + releases = 0).
        open_holds = [k for k, h in holds.items() if h.status == HoldStatus.OPEN]
        if open_holds:
            failures.append(f"{where}: {len(open_holds)} open hold(s), e.g. {open_holds[0]}")
        held = sum(e.delta for e in entries if e.kind in ("hold", "hold_release"))
        if held != 0:
            failures.append(f"{where}: holds and their releases sum to {held}, not 0")
        totals["holds"] += len(holds)
        charged_messages: dict[int, int] = defaultdict(int)
        embedded: dict[int, list] = defaultdict(list)
        for entry in (e for e in entries if e.kind in ("chat", "embedding")):
            what = (
                f"{where}: {entry.kind} debit {entry.pk} ({entry.reference or 'no reference'}, {entry.tokens} tokens)"
            )
            totals[f"{entry.kind}_debits"] += 1
            totals[f"{entry.kind}_tokens"] += entry.tokens
            totals[f"{entry.kind}_credits"] += -entry.delta
            if not _one_to_one(entry):
                failures.append(
                    f"{what}: charged {-entry.delta} credits (shortfall {entry.shortfall}), not its tokens at 1:1"
                )
            ref = references.parse(entry.reference)
            if entry.kind == "chat" and ref.kind == "message":
                message = messages.get(ref.id)
                if message is None:
                    failures.append(f"{what}: no such answer")
                elif message.total_tokens != entry.tokens:
                    failures.append(f"{what}: its answer reports {message.total_tokens} tokens")
                else:
                    charged_messages[ref.id] += -entry.delta
            elif entry.kind == "embedding" and ref.kind == "document":
                embedded[ref.id].append(entry)
            elif entry.kind == "embedding" and ref.kind == "search":
                if entry.idempotency_key.startswith("search:"):
                    totals["rest_search_debits"] += 1
                    continue
                # A chat turn's query embedding, drawn from the turn's hold ("chat:<request>:query").
                hold = holds.get(entry.idempotency_key.rsplit(":", 1)[0])
                if not entry.idempotency_key.startswith("chat:") or hold is None:
                    failures.append(f"{what}: matches no search request and no chat turn's hold")
                else:
                    totals["chat_query_debits"] += 1
            else:
                failures.append(f"{what}: matches no answer, document revision or search")
        # Every answer that used tokens was charged, exactly what it says it was.
        for message in messages.values():
            if message.total_tokens and charged_messages.get(message.pk, 0) != message.credits_charged:
                failures.append(
                    f"{where}: answer {message.pk} used {message.total_tokens} tokens, says "
                    f"{message.credits_charged} credits, charged {charged_messages.get(message.pk, 0)}"
                )
        totals["answers"] += len(messages)
        # Documents: ready or failed with a reason; each revision's embedding debits = its tokens.
        for document in documents.values():
            totals[f"documents_{document.status}"] += 1
            if document.status in (Status.PENDING, Status.PROCESSING):
                failures.append(f"{where}: document {document.pk} still {document.status}")
            elif document.status == Status.FAILED and not (document.error and document.error_code):
                failures.append(f"{where}: document {document.pk} failed without a reason")
            debits = embedded.pop(document.pk, [])
            stale = [e for e in debits if e.reference != references.document(document.pk, document.revision)]
            if stale:
                failures.append(
                    f"{where}: document {document.pk} has debits for another revision ({stale[0].reference})"
                )
            tokens, credits = sum(e.tokens for e in debits), sum(-e.delta for e in debits)
            if (tokens, credits) != (document.embedding_tokens, document.credits_charged):
                failures.append(
                    f"{where}: document {document.pk} reports {document.embedding_tokens} tokens / "
                    f"{document.credits_charged} credits, its debits {tokens} / {credits}"
                )
        for document_id, debits in embedded.items():
            failures.append(f"{where}: {len(debits)} embedding debit(s) for document {document_id}, not in the account")
        if searches is not None:
            rest = sum(1 for e in entries if e.kind == "embedding" and e.idempotency_key.startswith("search:"))
            if rest != searches.get(account_id, 0):
                failures.append(f"{where}: {rest} search debits for {searches.get(account_id, 0)} searches answered")
    return {"ok": not failures, "failures": failures[:50], "failure_count": len(failures), **totals}


# --- processes -------------------------------------------------------------------------------


def _start(llm_url: str) -> tuple[str, list[tuple[str, subprocess.Popen]]]:
    """2 daphne processes on one socket and 2 rq workers, as `make run` starts them; the limits
    that would refuse a benchmark's load raised."""
    from config.run import listening_socket, spawn_web, worker_argv

    env = dict(
        os.environ,
        LLM_BASE_URL=llm_url,
        CHAT_RATE_PER_USER="1000000/min",
        CHAT_RATE_PER_ACCOUNT="1000000/min",
        WS_MAX_SOCKETS_PER_PRINCIPAL="10000",
        API_RATE_LIMIT="1000000/min",
        LOG_LEVEL="WARNING",
        GROUNDWORK_LOCAL="1",
    )
    port = _free_port()
    children: list[tuple[str, subprocess.Popen]] = []
    sock = listening_socket("127.0.0.1", port)
    try:
        for i in range(2):
            children.append(
                (f"web{i + 1}", spawn_web(sock, env, i + 1, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            )
        for i in range(2):
            children.append(
                (
                    f"worker{i + 1}",
                    subprocess.Popen(
                        worker_argv(),
                        cwd=BASE_DIR,
                        env=env,
                        start_new_session=True,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    ),
                )
            )
    finally:
        sock.close()
    try:
        for name, process in children:
            if name.startswith("web"):
                _wait(f"http://127.0.0.1:{port}/healthz", process)
    except BaseException:
        _stop(children)
        raise
    return f"127.0.0.1:{port}", children


def _stop(children: list[tuple[str, subprocess.Popen]]) -> None:
    from config.run import stop_children

    stop_children(children)


def _rss_mb(pid: int) -> float:
    import psutil

    try:
        process = psutil.Process(pid)
        rss = process.memory_info().rss
        for child in process.children(recursive=True):  # a worker's work horse
            try:
                rss += child.memory_info().rss
            except psutil.Error:
                pass
        return round(rss / 2**20, 1)
    except psutil.Error:
        return 0.0


def _pg_connections() -> dict:
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FILTER (WHERE datname = current_database()), count(*) "
                "FROM pg_stat_activity WHERE backend_type = 'client backend'"
            )
            here, everywhere = cursor.fetchone()
        return {"bench_db": here, "server": everywhere}
    finally:
        connection.close()  # the sampler holds none between samples (its own is counted above)


# --- the load ----------------------------------------------------------------------------


def _accounts(count: int) -> list[tuple[int, str]]:
    from accounts.models import User
    from accounts.services import account_create, api_key_create
    from core.tenancy import account_context

    made = []
    for i in range(count):
        owner = User.objects.create_user(email=f"bench-soak-{time.time_ns()}-{i}@bench.test", password=None)
        account = account_create(name=f"bench soak {i + 1}", owner=owner, initial_credits=50_000_000)
        with account_context(account):
            _, raw = api_key_create(account=account, actor=None, name="soak")
        made.append((account.pk, raw))
    return made


def _prose(rng: random.Random, sections: int) -> str:
    return "\n\n".join(
        f"# Section {s}\n\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 160))) + "."
        for s in range(sections)
    )


class _Load:
    def __init__(self, host: str, accounts: list[tuple[int, str]], think_s: float):
        self.host, self.accounts, self.think_s = host, accounts, think_s
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results: list[tuple[float, str, float, bool, str]] = []  # (at, operation, seconds, ok, error)
        self.searches_ok: dict[int, int] = defaultdict(int)

    def _record(self, operation: str, started: float, ok: bool, error: str = "") -> None:
        with self.lock:
            self.results.append((time.monotonic(), operation, time.monotonic() - started, ok, error))

    def _upload(self, client, rng, account_id: int, key: str):
        broken = rng.random() < 1 / 8
        if broken:  # a PDF that is not one: the pipeline must fail it with a reason
            files = {"file": (f"broken-{time.time_ns()}.pdf", b"%PDF-1.4\n" + rng.randbytes(2000), "application/pdf")}
        else:
            files = {"file": (f"notes-{time.time_ns()}.md", _prose(rng, rng.randint(2, 8)).encode(), "text/markdown")}
        response = client.post(
            f"http://{self.host}/api/v1/documents/", files=files, headers={"Authorization": f"Bearer {key}"}
        )
        return response.status_code == 202 or (broken and response.status_code == 400), str(response.status_code)

    def _search(self, client, rng, account_id: int, key: str):
        query = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))
        response = client.post(
            f"http://{self.host}/api/v1/search/", json={"query": query}, headers={"Authorization": f"Bearer {key}"}
        )
        if response.status_code == 200:
            with self.lock:
                self.searches_ok[account_id] += 1
        return response.status_code == 200, str(response.status_code)

    def _chat(self, client, rng, account_id: int, key: str):
        from websockets.sync.client import connect

        question = f"What does our {rng.choice(WORDS)} {rng.choice(WORDS)} policy say?"
        with connect(
            f"ws://{self.host}/ws/chat/",
            additional_headers={"Authorization": f"Bearer {key}"},
            max_size=None,
            open_timeout=30,
        ) as ws:
            ws.send(json.dumps({"type": "chat.message", "message": question}))
            while True:
                frame = json.loads(ws.recv(timeout=120))
                if frame["type"] in ("chat.done", "chat.error"):
                    return frame["type"] == "chat.done", frame.get("code", "")

    def client(self, seed: int) -> None:
        import httpx

        rng = random.Random(seed)
        with httpx.Client(timeout=120) as client:
            while not self.stop.is_set():
                operation = rng.choices(OPERATIONS, WEIGHTS)[0]
                account_id, key = rng.choice(self.accounts)
                started = time.monotonic()
                try:
                    ok, error = getattr(self, f"_{operation}")(client, rng, account_id, key)
                except Exception as exc:  # a refused connection, a timeout: an error of the window
                    ok, error = False, type(exc).__name__
                self._record(operation, started, ok, "" if ok else error)
                self.stop.wait(self.think_s)

    def window(self, since: float, until: float) -> dict:
        from bench.common import percentile

        with self.lock:
            rows = [r for r in self.results if since <= r[0] < until]
        out = {}
        for operation in OPERATIONS:
            done = [r for r in rows if r[1] == operation]
            ms = [r[2] * 1000 for r in done if r[3]] or [0.0]
            errors = [r[4] for r in done if not r[3]]
            out[operation] = {
                "n": len(done),
                "p50_ms": round(percentile(ms, 50), 1),
                "p95_ms": round(percentile(ms, 95), 1),
                "errors": len(errors),
                **({"error_kinds": sorted(set(errors))} if errors else {}),
            }
        return out


def _drain(account_ids: list[int], timeout: float) -> bool:
    """Until no document of the accounts is pending or processing and no hold is open."""
    from billing.models import CreditHold, HoldStatus
    from core.tenancy import account_context
    from documents.models import Document, Status

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = 0
        for account_id in account_ids:
            with account_context(account_id=account_id):
                busy += (
                    Document.objects.for_account(account_id)
                    .filter(status__in=[Status.PENDING, Status.PROCESSING])
                    .count()
                )
                busy += CreditHold.objects.for_account(account_id).filter(status=HoldStatus.OPEN).count()
        if not busy:
            return True
        time.sleep(1)
    return False


def run() -> dict:
    import logging

    from django.conf import settings

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line a request otherwise
    knobs = _settings()
    answer = " ".join(f"word{i}" for i in range(40))
    llm_port = _free_port()
    fake = subprocess.Popen(
        [sys.executable, "-m", "llm.fake_server", "--port", str(llm_port), "--answer", answer],
        cwd=BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    llm_url = f"http://127.0.0.1:{llm_port}/v1"
    settings.LLM_BASE_URL = llm_url
    children: list[tuple[str, subprocess.Popen]] = []
    samples: list[dict] = []
    threads: list[threading.Thread] = []
    load = None
    try:
        _wait(f"{llm_url}/models", fake)
        accounts = _accounts(knobs["accounts"])
        host, children = _start(llm_url)
        processes = [*children, ("model_server", fake)]
        load = _Load(host, accounts, knobs["think_s"])
        started = time.monotonic()
        threads = [threading.Thread(target=load.client, args=(seed,), daemon=True) for seed in range(knobs["clients"])]
        for thread in threads:
            thread.start()
        last = started
        end = started + knobs["seconds"]
        while True:
            now = time.monotonic()
            if now >= end:
                break
            time.sleep(min(knobs["sample_s"] - (now - last), end - now))
            now = time.monotonic()
            dead = [name for name, p in children if p.poll() is not None]
            sample = {
                "t_s": round(now - started),
                "rss_mb": {name: _rss_mb(p.pid) for name, p in processes},
                "pg_connections": _pg_connections(),
                "load_average": round(os.getloadavg()[0], 2),
                "operations": load.window(last, now),
                **({"dead": dead} if dead else {}),
            }
            samples.append(sample)
            print(json.dumps(sample), file=sys.stderr, flush=True)
            last = now
            if dead:
                break
        load.stop.set()
        for thread in threads:
            thread.join(180)
        drained = _drain([a for a, _ in accounts], timeout=300)
        final_rss = {name: _rss_mb(p.pid) for name, p in processes}
    finally:
        if load is not None:
            load.stop.set()
        _stop(children)
        fake.terminate()
        try:
            fake.wait(10)
        except subprocess.TimeoutExpired:
            fake.kill()
            fake.wait()
    reconciliation = reconcile([a for a, _ in accounts], searches=dict(load.searches_ok))
    if not drained:
        reconciliation["ok"] = False
        reconciliation["failures"].insert(0, "the queue did not drain in 300 s after the load stopped")
    totals = load.window(0, float("inf"))
    report = {
        "settings": {
            **knobs,
            "web_processes": 2,
            "workers": 2,
            "model": "fake model server (zero latency, 40-word answers)",
            "pricing": settings.CREDITS_PER_1K_TOKENS,
        },
        "samples": samples,
        "final_rss_mb": final_rss,
        "totals": totals,
        "reconciliation": reconciliation,
    }
    if not reconciliation["ok"]:
        report["result"] = "reconciliation failed"
        print("reconciliation failed:\n  " + "\n  ".join(reconciliation["failures"]), file=sys.stderr, flush=True)
    else:
        report["result"] = "reconciled"
    return report
