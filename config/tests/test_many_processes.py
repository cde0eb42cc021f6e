"""Two web and two worker processes against one database and one Redis: what a
person does on one process is what every other process sees, and each job is done once.

The web processes are started the way `make run` starts them (config/run.py: daphne on a
listening socket it is handed); here each has a port of its own so that a test can talk to
one process and then the other, as a load balancer might send it. The model server is the
deterministic fake, in this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from accounts.tests.factories import make_api_key
from billing import references
from billing.models import CreditLedgerEntry
from config.embedded import BASE_DIR
from config.run import listening_socket, spawn_web, worker_argv
from config.testing import already_running, free_port, multipart_file
from core.tenancy import account_context
from documents.models import Chunk

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HANDBOOK = (
    "# Holidays\n\nEveryone has twenty-eight days of paid holiday a year; unused days carry "
    "over until March.\n\n# Laptops\n\nNew starters get a laptop on day one."
)


class Cluster:
    def __init__(self, ports: list[int], processes: dict[str, subprocess.Popen], logs: dict, others: tuple[int, int]):
        self.ports, self.processes, self.logs = ports, processes, logs
        # Workers and web processes of the run already alive on this Redis database when the
        # cluster started (the suite's shared daphne, conftest.py session_daphne): /healthz
        # counts them too.
        self.other_workers, self.others = others

    def url(self, web: int, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[web]}{path}"

    def output(self) -> str:
        return "\n".join(
            f"--- {name} ---\n{path.read_text(errors='replace')[-3000:]}" for name, path in self.logs.items()
        )


def _get_json(url: str, key: str | None = None):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=15) as response:
        return json.loads(response.read())


def _post_json(url: str, key: str, body: dict):
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.loads(response.read())


def _upload(url: str, key: str, name: str, text: str) -> dict:
    body, form_type = multipart_file(name, text.encode(), "text/markdown")
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Authorization": f"Bearer {key}", "Content-Type": form_type}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 202
        return json.loads(response.read())


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_healthy(cluster: Cluster, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    health: dict = {}
    while True:
        for name, process in cluster.processes.items():
            assert process.poll() is None, f"{name} exited:\n{cluster.output()}"
        try:
            health = _get_json(cluster.url(0, "/healthz"))
            if (
                health.get("workers") == 2 + cluster.other_workers
                and health.get("web_processes", 1) == 2 + cluster.others
            ):
                return health
        except OSError:
            pass
        assert time.monotonic() < deadline, (
            f"not 2 web + 2 workers beside {cluster.other_workers} + {cluster.others}: {health}\n{cluster.output()}"
        )
        time.sleep(0.3)


@pytest.fixture(scope="module")
def model():
    from llm.fake_server import FakeOpenAIServer

    with FakeOpenAIServer(answer="Everyone gets twenty-eight days of paid holiday [Document 1].") as server:
        yield server


@pytest.fixture(scope="module")
def cluster(django_db_setup, model, tmp_path_factory):
    others = already_running()  # /healthz counts them too
    logs_dir = tmp_path_factory.mktemp("cluster-logs")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(
        DATABASE_URL=os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"],
        GROUNDWORK_TESTING="1",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        LLM_BASE_URL=model.base_url,
        PYTHONUNBUFFERED="1",
    )
    ports = [free_port(), free_port()]
    processes, logs = {}, {}
    try:
        for index, port in enumerate(ports):
            sock = listening_socket("127.0.0.1", port)
            logs[f"web {index + 1}"] = logs_dir / f"web{index + 1}.log"
            processes[f"web {index + 1}"] = spawn_web(
                sock, env, index + 1, stdout=logs[f"web {index + 1}"].open("w"), stderr=subprocess.STDOUT
            )
            sock.close()
        for index in range(2):
            logs[f"worker {index + 1}"] = logs_dir / f"worker{index + 1}.log"
            processes[f"worker {index + 1}"] = subprocess.Popen(
                worker_argv(),
                cwd=BASE_DIR,
                env=env,
                start_new_session=True,
                stdout=logs[f"worker {index + 1}"].open("w"),
                stderr=subprocess.STDOUT,
            )
        result = Cluster(ports, processes, logs, others)
        _wait_healthy(result)
        yield result
    finally:
        for process in processes.values():
            _stop(process)


@pytest.fixture(autouse=True)
def _jobs_finish_before_flush(transactional_db, cluster):
    """A job still running when the test database is emptied would hold locks: drain first."""
    import django_rq

    yield
    queue = django_rq.get_queue("default")
    deadline = time.monotonic() + 60
    while (queue.count or queue.started_job_registry.count) and time.monotonic() < deadline:
        time.sleep(0.2)


def _wait_ready(cluster: Cluster, key: str, document_ids: list[int], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    pending = set(document_ids)
    while pending:
        for document_id in list(pending):
            status = _get_json(cluster.url(len(pending) % 2, f"/api/v1/documents/{document_id}/"), key)["status"]
            assert status not in ("failed", "deleting"), (document_id, status, cluster.output())
            if status == "ready":
                pending.discard(document_id)
        assert time.monotonic() < deadline, f"still not ready: {pending}\n{cluster.output()}"
        time.sleep(0.2)


async def _ask_over_websocket(url: str, key: str, question: str) -> dict:
    import websockets

    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        await ws.send(json.dumps({"type": "chat.message", "message": question}))
        frames = []
        while not frames or frames[-1]["type"] not in ("chat.done", "chat.error"):
            frames.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
    assert frames[-1]["type"] == "chat.done", frames
    return {"conversation_id": frames[0]["conversation_id"], "done": frames[-1]}


def test_a_websocket_on_one_process_and_rest_on_the_other_see_one_conversation_and_balance(cluster, account_a, model):
    key = make_api_key(account_a)
    document = _upload(cluster.url(1, "/api/v1/documents/"), key, "handbook.md", HANDBOOK)
    _wait_ready(cluster, key, [document["id"]])

    ws_url = f"ws://127.0.0.1:{cluster.ports[0]}/ws/chat/"
    asked = asyncio.run(_ask_over_websocket(ws_url, key, "How many days of holiday do we get?"))
    conversation_id = asked["conversation_id"]

    # Process 2 sees the conversation process 1 wrote, and the balance process 1 reported.
    seen = _get_json(cluster.url(1, f"/api/v1/conversations/{conversation_id}/"), key)
    assert [m["role"] for m in seen["messages"]] == ["user", "assistant"]
    assert "twenty-eight days" in seen["messages"][1]["content"]
    assert _get_json(cluster.url(1, "/api/v1/credits/"), key)["balance"] == asked["done"]["credits_remaining"]

    # It continues there, and process 1 sees the continuation and the new balance.
    status, answer = _post_json(
        cluster.url(1, "/api/v1/chat/"), key, {"message": "And what about laptops?", "conversation_id": conversation_id}
    )
    assert status == 200 and answer["conversation_id"] == conversation_id
    seen = _get_json(cluster.url(0, f"/api/v1/conversations/{conversation_id}/"), key)
    assert [m["role"] for m in seen["messages"]] == ["user", "assistant", "user", "assistant"]
    assert _get_json(cluster.url(0, "/api/v1/credits/"), key)["balance"] == answer["credits_remaining"]


def test_each_job_is_taken_by_one_of_two_workers_exactly_once(cluster, account_a):
    import django_rq
    from rq import Worker

    key = make_api_key(account_a)
    redis = django_rq.get_connection("default")
    done_before = {w.name: w.successful_job_count for w in Worker.all(connection=redis)}
    texts = [f"# Note {i}\n\nMeeting room {i} is on floor {i % 4} and seats {i + 3} people." for i in range(12)]
    # Uploaded at once, half through each web process, so both workers are busy at the same time.
    with ThreadPoolExecutor(6) as pool:
        documents = list(
            pool.map(
                lambda i: _upload(cluster.url(i % 2, "/api/v1/documents/"), key, f"note-{i}.md", texts[i]),
                range(len(texts)),
            )
        )
    ids = [d["id"] for d in documents]
    _wait_ready(cluster, key, ids)

    with account_context(account_a):
        for document_id in ids:
            charges = CreditLedgerEntry.objects.for_account(account_a).filter(
                reference__startswith=references.document_prefix(document_id)
            )
            assert charges.count() == 1, f"document {document_id} charged {charges.count()} times"
            indexes = list(
                Chunk.objects.for_account(account_a)
                .filter(document_id=document_id)
                .values_list("chunk_index", flat=True)
            )
            assert indexes and len(indexes) == len(set(indexes)), f"document {document_id} chunked twice"
    workers = Worker.all(connection=redis)
    assert len(workers) == 2
    took = {w.name: w.successful_job_count - done_before.get(w.name, 0) for w in workers}
    assert all(count >= 1 for count in took.values()), f"one worker did all the jobs: {took}"
    assert django_rq.get_queue("default").failed_job_registry.count == 0


def test_the_procfiles_web_line_runs_web_processes_on_one_port_and_stops_them(cluster, tmp_path):
    """`web: python -m config.serve web` (Procfile): WEB_PROCESSES daphne processes share one
    port; /healthz counts them beside this module's two; SIGTERM stops them all."""
    import psutil

    port = free_port()
    env = dict(
        os.environ,
        HOST="127.0.0.1",
        PORT=str(port),
        WEB_PROCESSES="2",
        DATABASE_URL=os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"],
        GROUNDWORK_TESTING="1",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        PYTHONUNBUFFERED="1",
    )
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    log = tmp_path / "serve.log"
    serve = subprocess.Popen(
        [sys.executable, "-m", "config.serve", "web"],
        cwd=BASE_DIR,
        env=env,
        start_new_session=True,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert serve.poll() is None, log.read_text()
            try:
                if _get_json(f"http://127.0.0.1:{port}/healthz").get("web_processes") == 4 + cluster.others:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        daphnes = psutil.Process(serve.pid).children()
        assert len(daphnes) == 2
        assert all(_get_json(f"http://127.0.0.1:{port}/healthz")["status"] == "ok" for _ in range(10))
    finally:
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(30) == 0, log.read_text()
    gone, alive = psutil.wait_procs(daphnes, timeout=10)
    assert not alive
    assert _get_json(cluster.url(0, "/healthz"))["web_processes"] == 2 + cluster.others  # they said goodbye
