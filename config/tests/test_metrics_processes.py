"""/metrics with several real processes (docs/operations/metrics.md): a daphne process and an rq
worker share one PROMETHEUS_MULTIPROC_DIR, as `make run` and `python -m config.serve` set it,
and one scrape of the web process counts what both did: its requests and websocket turn, the
worker's ingestion and embedding charge. With LOG_FORMAT=json the worker's lines are JSON and
the ingestion job's carry the upload request's X-Request-ID. Processes are started the way
config/run.py starts them, with test_many_processes.py's helpers, and all stopped at the end."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.request

import pytest
from django.db import connection

from accounts.tests.factories import make_api_key
from config.embedded import BASE_DIR
from config.run import listening_socket, mark_dead, spawn_web, worker_argv
from config.testing import already_running, free_port
from config.tests.test_many_processes import HANDBOOK, _ask_over_websocket, _get_json, _stop
from config.tests.test_metrics import samples, value

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _upload(url: str, key: str, request_id: str) -> dict:
    boundary = "----groundwork-test"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="handbook.md"\r\n'
        f"Content-Type: text/markdown\r\n\r\n{HANDBOOK}\r\n--{boundary}--\r\n"
    ).encode()
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "X-Request-ID": request_id,
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 202 and response.headers["X-Request-ID"] == request_id
        return json.loads(response.read())


def _chat_streamed(url: str, key: str, request_id: str) -> str:
    request = urllib.request.Request(
        url,
        data=json.dumps({"message": "And laptops?"}).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", "X-Request-ID": request_id},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["X-Request-ID"] == request_id
        return response.read().decode()


def _scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=15) as response:
        return samples(response.read().decode())


def _wait(condition, what: str, output, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}:\n{output()}"
        time.sleep(0.3)


async def _scrape_with_a_socket_open(port: int, key: str) -> dict:
    import websockets

    async with websockets.connect(
        f"ws://127.0.0.1:{port}/ws/chat/", additional_headers={"Authorization": f"Bearer {key}"}
    ):
        return await asyncio.to_thread(_scrape, port)


def test_one_scrape_counts_a_web_process_and_a_worker_and_the_worker_logs_json_with_the_request_id(account_a, tmp_path):
    from llm.fake_server import FakeOpenAIServer

    other_workers, _ = already_running()  # /healthz counts them too
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(
        DATABASE_URL=os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"],
        GROUNDWORK_TESTING="1",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        PYTHONUNBUFFERED="1",
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
        LOG_FORMAT="json",
    )
    logs = {"web": tmp_path / "web.log", "worker": tmp_path / "worker.log"}
    processes: dict[str, subprocess.Popen] = {}

    def output() -> str:
        return "\n".join(f"--- {name} ---\n{path.read_text(errors='replace')[-3000:]}" for name, path in logs.items())

    with FakeOpenAIServer(answer="Everyone gets twenty-eight days of paid holiday [Document 1].") as model:
        env["LLM_BASE_URL"] = model.base_url
        port = free_port()
        try:
            sock = listening_socket("127.0.0.1", port)
            processes["web"] = spawn_web(sock, env, 1, stdout=logs["web"].open("w"), stderr=subprocess.STDOUT)
            sock.close()
            processes["worker"] = subprocess.Popen(
                worker_argv(),
                cwd=BASE_DIR,
                env=env,
                start_new_session=True,
                stdout=logs["worker"].open("w"),
                stderr=subprocess.STDOUT,
            )

            def healthy() -> bool:
                assert all(p.poll() is None for p in processes.values()), output()
                try:
                    return _get_json(f"http://127.0.0.1:{port}/healthz").get("workers") == 1 + other_workers
                except OSError:
                    return False

            _wait(healthy, "the web process or the worker did not come up", output)

            key = make_api_key(account_a)
            document = _upload(f"http://127.0.0.1:{port}/api/v1/documents/", key, "mp-upload-1")
            url = f"http://127.0.0.1:{port}/api/v1/documents/{document['id']}/"
            _wait(lambda: _get_json(url, key)["status"] in ("ready", "failed"), "not ingested", output)
            assert _get_json(url, key)["status"] == "ready", output()
            asked = asyncio.run(_ask_over_websocket(f"ws://127.0.0.1:{port}/ws/chat/", key, "How much holiday?"))
            assert asked["done"]["answer"]

            streamed = _chat_streamed(f"http://127.0.0.1:{port}/api/v1/chat/?stream=1", key, "mp-chat-1")
            assert '"type": "chat.done"' in streamed, streamed

            found = asyncio.run(_scrape_with_a_socket_open(port, key))
        finally:
            for process in processes.values():
                _stop(process)
                mark_dead_in(metrics_dir, process)

    # The web process's own counts...
    assert value(found, "groundwork_http_requests_total", view="api-documents", method="POST", status="202") == 1
    assert value(found, "groundwork_http_request_duration_seconds_count", view="api-documents") >= 1
    assert value(found, "groundwork_chat_turns_total", surface="websocket", outcome="done") == 1
    assert value(found, "groundwork_chat_time_to_first_token_seconds_count", surface="websocket") == 1
    assert value(found, "groundwork_chat_turns_total", surface="api", outcome="done") == 1
    # At least the socket open during the scrape (the gauge counts every socket lease in this
    # Redis: one of an earlier test in the session may not have expired yet).
    assert value(found, "groundwork_open_websockets") >= 1
    # ...and the worker's, in the same scrape.
    assert value(found, "groundwork_documents_ingested_total", outcome="ready") == 1
    embedding = sum(
        v for k, v in found.items() if k[0] == "groundwork_credits_debited_total" and dict(k[1])["kind"] == "embedding"
    )
    assert embedding > 0
    assert value(found, "groundwork_documents", status="ready") == 1
    # Each process wrote files of its own (the worker's job horses share one set).
    writers = {path.stem.split("_", 1)[1] for path in metrics_dir.glob("*.db")}
    assert str(processes["web"].pid) in writers and f"{processes['worker'].pid}-jobs" in writers, writers

    lines = [line for line in logs["worker"].read_text().splitlines() if line.startswith("{")]
    parsed = [json.loads(line) for line in lines]
    assert parsed and all({"time", "level", "logger", "message", "request_id"} <= set(p) for p in parsed)
    claimed = [p for p in parsed if p["message"].startswith("claimed document")]
    assert claimed and claimed[0]["request_id"] == "mp-upload-1", output()
    # The web process's lines are JSON too; the streamed turn's model call (made from the turn's
    # thread, after the request's middleware returned) carries that request's id.
    web = [json.loads(line) for line in logs["web"].read_text().splitlines() if line.startswith("{")]
    assert any(p["request_id"] == "mp-chat-1" and "/chat/completions" in p["message"] for p in web), output()


def mark_dead_in(folder, process: subprocess.Popen) -> None:
    previous = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    try:
        mark_dead(process)
    finally:
        if previous is None:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR")
        else:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = previous
