"""`make run` end to end: a real supervisor process on a fresh data folder, twice.

It starts its own embedded PostgreSQL (in a temporary .data), migrates, ensures the demo
account, serves HTTP with a worker, and on Ctrl-C stops every process it started.
"""

import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from config.embedded import BASE_DIR
from config.testing import installation_env, multipart_file

pytestmark = [pytest.mark.system, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return None, ""


class Supervisor:
    """`make run` as a person sees it: a process and the lines it prints."""

    def __init__(self, data_dir: Path, port: int, local_models: bool = False):
        self.process = _start(data_dir, port, local_models)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            assert self.process.poll() is None, self.output
            assert time.monotonic() < deadline, f"never printed {text!r}:\n{self.output}"
            time.sleep(0.2)


def _start(data_dir: Path, port: int, local_models: bool = False) -> subprocess.Popen:
    """`make run` on `data_dir`; with `local_models`, LLM_BASE_URL is unset, so it starts the
    bundled local model server (on a free port it chooses)."""
    env = installation_env(
        data_dir, PORT=port, DEMO_PASSWORD="Demo-pass-for-tests-1", WEB_PROCESSES=2, WORKER_PROCESSES=2
    )
    if not local_models:
        env["LLM_BASE_URL"] = "http://127.0.0.1:9/v1"
    return subprocess.Popen(
        [sys.executable, "-m", "config.run"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _health(port) -> dict:
    import json

    status, body = _get(f"http://127.0.0.1:{port}/healthz")
    assert status == 200, body
    return json.loads(body)


def _stop_and_check_nothing_left(run: Supervisor, data_dir: Path) -> None:
    process = run.process
    children = psutil.Process(process.pid).children(recursive=True)
    assert len(children) >= 5, "expected 2 web, 2 worker and cron processes"
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0, run.output
    run.reader.join(timeout=10)
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    assert not (data_dir / "postgres" / "postmaster.pid").exists(), "embedded PostgreSQL still running"
    assert "stopped" in run.output.splitlines()[-1]


def _child(run: Supervisor, *words: str) -> psutil.Process:
    for child in psutil.Process(run.process.pid).children():
        if all(word in " ".join(child.cmdline()) for word in words):
            return child
    raise AssertionError(f"no child process running {words}")


def _workers(run: Supervisor) -> set[int]:
    return {
        child.pid for child in psutil.Process(run.process.pid).children() if "rqworker" in " ".join(child.cmdline())
    }


def _killed_processes_are_started_again(run: Supervisor, port: int, models_port: int) -> None:
    """The model server and a worker killed (SIGKILL, as the OOM killer does): the supervisor
    starts each again, on the same port for the models (the app's LLM_BASE_URL stays right),
    and the run goes on."""
    models = _child(run, "llm.local_server")
    worker = _child(run, "rqworker")
    models.kill()
    worker.kill()
    run.wait_for("models exited with code -9; starting it again", timeout=30)
    run.wait_for("models started again", timeout=30)
    deadline = time.monotonic() + 300
    while _get(f"http://127.0.0.1:{models_port}/v1/models")[0] != 200:
        assert run.process.poll() is None, run.output
        assert time.monotonic() < deadline, f"the model server did not come back:\n{run.output}"
        time.sleep(0.5)
    assert _child(run, "llm.local_server").pid != models.pid
    deadline = time.monotonic() + 60
    while len(_workers(run) - {worker.pid}) != 2:  # rq's record of the killed one expires later
        assert time.monotonic() < deadline, f"the worker did not come back:\n{run.output}"
        time.sleep(0.5)
    assert _health(port)["status"] == "ok"
    assert "exited with code -9; starting it again" in run.output


def _api_key(data_dir: Path, port: int) -> str:
    """An API key of the demo team (and credits for five real files: the demo's first grant
    covers a few pages), made with manage.py on the running installation."""
    code = (
        "from django.core.management import call_command; "
        "from accounts.models import Account; from accounts.tests.factories import make_api_key; "
        "account = Account.objects.get(name='Demo team'); "
        "call_command('grant_credits', account.pk, 200000, reason='five real files'); "
        "print('KEY', make_api_key(account))"
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=BASE_DIR,
        env=installation_env(data_dir, PORT=port),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return re.search(r"KEY (\S+)", done.stdout).group(1)


def _api(port: int, key: str, path: str, body: bytes | None = None, content_type: str = "application/json"):
    import json

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/{path}",
        data=body,
        headers={"Authorization": f"Bearer {key}", **({"Content-Type": content_type} if body else {})},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        return response.status, json.loads(response.read())


def _five_files_and_a_question_on_the_local_models(data_dir: Path, port: int, tmp_path: Path) -> None:
    """Five real files dropped at once on make run's own local model server (chat and
    embeddings sharing its cores), and a question asked meanwhile: all five end Ready (none
    Failed because the server was busy) and the question is answered, stored in its
    conversation."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from documents.tests.files import DEBIAN_PDF, docx_bytes
    from documents.tests.office_files import make_pptx, make_xlsx

    key = _api_key(data_dir, port)
    html = "<html><head><title>Leave</title></head><body><h1>Leave policy</h1>" + "".join(
        f"<h2>Rule {n}</h2><p>Requests of type {n} go to the team lead at least {n} days ahead.</p>"
        for n in range(1, 40)
    )
    files = [
        ("camlidl.pdf", DEBIAN_PDF.read_bytes(), "application/pdf"),
        ("leave.html", (html + "</body></html>").encode(), "text/html"),
        (
            "report.docx",
            docx_bytes(tmp_path),
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        ),
        ("facilities.xlsx", make_xlsx(), "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
        (
            "review.pptx",
            make_pptx(slides=8),
            "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        ),
    ]

    def upload(file) -> int:
        status, document = _api(port, key, "documents/", *multipart_file(*file))
        assert status == 202, document
        return document["id"]

    with ThreadPoolExecutor(6) as pool:
        uploads = [pool.submit(upload, f) for f in files]
        ids = [u.result() for u in uploads]
        question = json.dumps({"message": "Who do leave requests go to?"}).encode()
        status, answer = _api(port, key, "chat/", question)  # asked while the five are indexed
    assert status == 200 and answer["answer"].strip(), answer
    _status, conversation = _api(port, key, f"conversations/{answer['conversation_id']}/")
    assert [m["role"] for m in conversation["messages"]][:2] == ["user", "assistant"]
    deadline = time.monotonic() + 900
    while True:
        documents = {i: _api(port, key, f"documents/{i}/")[1] for i in ids}
        failed = {d["name"]: (d["error_code"], d["error"]) for d in documents.values() if d["status"] == "failed"}
        assert not failed, failed
        if all(d["status"] == "ready" for d in documents.values()):
            break
        assert time.monotonic() < deadline, {i: (d["status"], d.get("progress")) for i, d in documents.items()}
        time.sleep(2)
    assert all(d["progress"] is None and d["chunk_count"] > 0 for d in documents.values())


def test_make_run_twice_serves_and_stops_cleanly(tmp_path):
    data_dir = tmp_path / "data"
    port = _free_port()
    first = Supervisor(data_dir, port, local_models=True)
    try:
        first.wait_for(f"running at http://127.0.0.1:{port}/", timeout=300)
        models_port = int(re.search(r"local models ready on http://127\.0\.0\.1:(\d+)/v1", first.output).group(1))
        status, models = _get(f"http://127.0.0.1:{models_port}/v1/models")
        assert status == 200 and "smollm2-135m-instruct" in models
        health = _health(port)
        assert health["status"] == "ok" and health["database"] == "ok" and health["redis"] == "ok"
        assert health["workers"] == 2 and health["web_processes"] == 2  # WEB_PROCESSES, WORKER_PROCESSES
        assert "2 web and 2 worker processes" in first.output
        status, page = _get(f"http://127.0.0.1:{port}/login/")
        assert status == 200 and "Log in" in page
        assert "demo@example.com / Demo-pass-for-tests-1" in first.output
        _five_files_and_a_question_on_the_local_models(data_dir, port, tmp_path)
        _killed_processes_are_started_again(first, port, models_port)
    finally:
        if first.process.poll() is None:
            _stop_and_check_nothing_left(first, data_dir)
    assert _get(f"http://127.0.0.1:{models_port}/v1/models")[0] is None, "the model server outlived make run"

    started = time.monotonic()
    second = Supervisor(data_dir, port)
    try:
        second.wait_for(f"running at http://127.0.0.1:{port}/")
        reuse_seconds = time.monotonic() - started
        assert "starting embedded PostgreSQL" in second.output  # the first run stopped it
    finally:
        if second.process.poll() is None:
            _stop_and_check_nothing_left(second, data_dir)
    assert reuse_seconds < 60
