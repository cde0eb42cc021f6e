"""Browser tests: the real product in Debian's chromium, driven by Playwright.

What runs, and why each piece is a real process:
- daphne serving config.asgi (pytest-django's live_server is WSGI only, and Chat is a
  websocket), against the TEST database, so the test can read and seed the same rows;
- an rq worker for ingestion (`manage.py rqworker default`), the same code path as production;
- the deterministic fake OpenAI-compatible server, in this process, as the model provider.

All three are started once for the package (`shared_stack`) and stopped after its last test:
a worker on the "default" queue must not be running while other test modules drive jobs
in-process. A module that needs other settings starts a stack of its own (`stack`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from django.db import connection

from config.embedded import BASE_DIR

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SCREENSHOTS = BASE_DIR / "test-artifacts" / "screenshots"
# The fake model's answer: it cites two passages, with Markdown and a line of code, streamed
# one word at a time (chunk_delay) so the page visibly writes it.
ANSWER = (
    "Each page talks about its own **subject** [Document 1]. The report says *revenue grew* in every "
    "region [Document 2].\n\n- Holidays carry over until March\n- Use `groundwork` as the model name"
)


def _ensure_chromium() -> str:
    """Debian's chromium (no browser download): installed with apt when missing."""
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail(
            f"The browser tests need Debian's chromium at {CHROMIUM}. Install it with "
            "`sudo apt-get install -y chromium` (these tests install it themselves only as root "
            "on a Debian-based machine).",
            pytrace=False,
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
    ):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            pytest.fail(
                f"Could not install chromium with `{' '.join(command)}`:\n{result.stdout[-2000:]}\n"
                f"{result.stderr[-2000:]}",
                pytrace=False,
            )
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"apt-get installed chromium but {CHROMIUM} is missing.", pytrace=False)
    return CHROMIUM


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the process group (rq forks work horses into sessions of their own, so
    children are found through psutil too), then SIGKILL whatever is left."""
    if process.poll() is not None:
        return
    try:
        family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    _, alive = psutil.wait_procs(family, timeout=8)
    for leftover in alive:
        try:
            leftover.kill()
        except psutil.NoSuchProcess:
            pass
    process.wait(timeout=5)


class Stack:
    """daphne and an rq worker serving the test database, with the fake model server."""

    def __init__(self, base_url: str, model_server, commands: dict[str, list[str]], env: dict, logs_dir: Path):
        self.base_url = base_url
        self.model = model_server
        self.commands, self.env, self.logs_dir = commands, env, logs_dir
        self.processes: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def url(self, path: str) -> str:
        return self.base_url + path

    def output(self) -> str:
        return "\n".join(
            f"--- {name} ---\n{path.read_text(errors='replace')[-4000:]}" for name, path in self.logs.items()
        )

    def start(self, *names: str) -> None:
        for name in names or self.commands:
            self.logs[name] = self.logs_dir / f"{name}.log"
            self.processes[name] = subprocess.Popen(
                self.commands[name],
                cwd=BASE_DIR,
                env=self.env,
                start_new_session=True,
                stdout=self.logs[name].open("a"),
                stderr=subprocess.STDOUT,
            )

    def stop(self, *names: str) -> None:
        for name in names or list(self.processes):
            process = self.processes.pop(name, None)
            if process is not None:
                _stop(process)


def _wait_until_serving(stack: Stack, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, process in stack.processes.items():
            if process.poll() is not None:
                pytest.fail(f"{name} exited with {process.returncode}:\n{stack.output()}", pytrace=False)
        try:
            with urllib.request.urlopen(stack.base_url + "/login/", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    pytest.fail(f"daphne did not answer within {timeout} s:\n{stack.output()}", pytrace=False)


@contextmanager
def _running_stack(logs_dir: Path, env_extra: dict | None = None, *, worker: bool = True):
    """daphne (+ an rq worker on the "default" queue) on the test database and the fake model
    server, with this process's environment plus `env_extra`; stopped afterwards, also on failure."""
    from llm.fake_server import FakeOpenAIServer

    model = FakeOpenAIServer(answer=ANSWER, chunk_delay=0.04).start()
    database = connection.settings_dict["NAME"]
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(
        DATABASE_URL=os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + database,
        GROUNDWORK_TESTING="1",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        LLM_BASE_URL=model.base_url,
        # Sources may read the sites tests serve on loopback (e2e/test_sources_page.py).
        SOURCES_ALLOWED_HOSTS="127.0.0.1",
        PYTHONUNBUFFERED="1",
    )
    env.update(env_extra or {})
    port = _free_port()
    commands = {
        "daphne": [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
        "worker": [sys.executable, "manage.py", "rqworker", "default"],
    }
    result = Stack(f"http://127.0.0.1:{port}", model, commands, env, logs_dir)
    try:
        result.start(*(commands if worker else ["daphne"]))
        _wait_until_serving(result)
        yield result
    finally:
        result.stop()
        model.stop()


@pytest.fixture(scope="package")
def shared_stack(django_db_setup, tmp_path_factory):
    """One stack for every browser test that needs no settings of its own: started once for
    the package (per xdist worker; the e2e tests run as one group: pyproject's addopts)."""
    with _running_stack(tmp_path_factory.mktemp("e2e-logs")) as running:
        yield running


@pytest.fixture(scope="module")
def stack(shared_stack, tmp_path_factory, request):
    """The shared stack; or, for a module that names settings of its own (`STACK_ENV`, e.g.
    e2e/test_buy_credits.py) or needs this process's environment as its fixtures left it
    (`OWN_STACK = True`, e2e/test_sso.py), a stack of its own for that module. Its worker
    takes the shared worker's place meanwhile: two workers on one queue would run each
    other's jobs with the wrong settings."""
    module = request.module
    if not (getattr(module, "STACK_ENV", None) or getattr(module, "OWN_STACK", False)):
        yield shared_stack
        return
    shared_stack.stop("worker")
    try:
        with _running_stack(tmp_path_factory.mktemp("e2e-logs"), getattr(module, "STACK_ENV", {})) as own:
            yield own
    finally:
        shared_stack.start("worker")


@pytest.fixture(autouse=True)
def _model_as_started(stack):
    """Every test meets the model server as it was started: a test that changes its answer or
    its pace changes it for itself only."""
    stack.model.reset()


@pytest.fixture(scope="package")
def browser():
    from playwright.sync_api import sync_playwright

    executable = _ensure_chromium()
    # Playwright's sync API keeps an event loop running in this thread, which Django would
    # take for async code and refuse ORM calls from; the tests' ORM use is plain sync code.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def new_page(browser, stack, request):
    """A fresh browser context (its own cookies) per call; JS errors fail the test."""
    contexts, errors = [], []

    def make(width: int = 1280, height: int = 860):
        context = browser.new_context(
            base_url=stack.base_url, viewport={"width": width, "height": height}, device_scale_factor=1
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        return page

    yield make
    for context in contexts:
        context.close()
    assert not errors, f"JavaScript errors in the page: {errors}"


@pytest.fixture
def screenshot():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str, full_page: bool = True):
        # From the top: a full-page capture of a scrolled page shows the sticky header mid-page.
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)

    return take


@pytest.fixture(autouse=True)
def _jobs_finish_before_flush(transactional_db, stack):
    """The test database is emptied after each test (TRUNCATE). A job still running in the
    worker would hold row locks and make that fail, or write into the next test: wait for
    the queue to drain first. Set up after transactional_db, so torn down before its flush."""
    import django_rq

    yield
    queue = django_rq.get_queue("default")
    deadline = time.monotonic() + 60
    while (queue.count or queue.started_job_registry.count) and time.monotonic() < deadline:
        time.sleep(0.2)
