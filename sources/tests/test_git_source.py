"""The git kind against a real git server on loopback (`git daemon`, started by the test):
text, Markdown, reStructuredText, HTML and PDF files under a path become documents; a
re-sync reads only files whose blob changed."""

import socket
import subprocess
import time

import pytest

from billing.models import CreditLedgerEntry
from config.testing import free_port
from core.tenancy import account_context
from documents.models import Document


def _git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.name=Test", "-c", "user.email=test@example.test", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repository(tmp_path, settings):
    settings.SOURCES_ALLOWED_HOSTS = ["127.0.0.1"]
    work = tmp_path / "handbook"
    (work / "docs").mkdir(parents=True)
    (work / "docs" / "leave.md").write_text("# Leave\n\nEveryone has twenty-eight days of paid holiday a year.\n")
    (work / "docs" / "expenses.txt").write_text("Claims need receipts and a manager's approval.\n")
    (work / "docs" / "security.rst").write_text("Security\n========\n\nLaptops lock after five minutes.\n")
    (work / "docs" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)  # not a text file: skipped
    (work / "README.md").write_text("# Outside docs/\n\nNot part of the source.\n")
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "handbook")
    port = free_port()
    daemon = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            f"--base-path={tmp_path}",
            "--listen=127.0.0.1",
            f"--port={port}",
            "--informative-errors",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield work, f"git://127.0.0.1:{port}/handbook"
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def _charges(account):
    with account_context(account):
        return CreditLedgerEntry.objects.for_account(account).filter(kind="embedding").count()


def test_git_source_syncs_files_under_its_path_and_resyncs_by_blob(api_a, repository, commit_and_run, account_a):
    work, url = repository
    created = commit_and_run(
        lambda: api_a.post(
            "/api/v1/sources/", {"kind": "git", "url": url, "options": {"branch": "main", "path": "docs"}}
        )
    )
    assert created.status_code == 201, created.content
    source = api_a.get(f"/api/v1/sources/{created.json()['id']}/").json()
    assert source["status"] == "idle", source["error"]
    assert source["kind"] == "git" and source["options"] == {"branch": "main", "path": "docs"}
    assert source["last_sync"] == {"added": 3, "updated": 0, "removed": 0, "unchanged": 0}
    with account_context(account_a):
        names = sorted(Document.objects.for_account(account_a).filter(status="ready").values_list("name", flat=True))
    assert names == ["expenses.txt", "leave.md", "security.rst.txt"]
    charges = _charges(account_a)

    (work / "docs" / "leave.md").write_text("# Leave\n\nEveryone has thirty days of paid holiday a year.\n")
    (work / "docs" / "expenses.txt").unlink()
    (work / "docs" / "travel.md").write_text("# Travel\n\nBook trains for trips under five hours.\n")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "changes")
    commit_and_run(lambda: api_a.post(f"/api/v1/sources/{source['id']}/sync/"))
    source = api_a.get(f"/api/v1/sources/{source['id']}/").json()
    assert source["last_sync"] == {"added": 1, "updated": 1, "removed": 1, "unchanged": 1}, source
    assert _charges(account_a) == charges + 2
    with account_context(account_a):
        names = sorted(Document.objects.for_account(account_a).visible().values_list("name", flat=True))
    assert names == ["leave.md", "security.rst.txt", "travel.md"]


def test_a_missing_branch_fails_with_gits_reason(api_a, repository, commit_and_run):
    _, url = repository
    created = commit_and_run(
        lambda: api_a.post("/api/v1/sources/", {"kind": "git", "url": url, "options": {"branch": "nope"}})
    )
    source = api_a.get(f"/api/v1/sources/{created.json()['id']}/").json()
    assert source["status"] == "failed"
    assert source["error"].startswith(f"The repository {url} could not be read") and "nope" in source["error"]


@pytest.mark.parametrize(
    "body, code",
    [
        ({"kind": "git", "url": "file:///etc"}, "invalid_url"),
        ({"kind": "git", "url": "ssh://git@example.com/repo.git"}, "invalid_url"),
        ({"kind": "git", "url": "git://127.0.0.1/repo.git"}, "address_refused"),
        ({"kind": "git", "url": "git://10.0.0.5/repo.git"}, "address_refused"),
        (
            {"kind": "git", "url": "https://example.com/r.git", "options": {"branch": "--upload-pack=evil"}},
            "invalid_option",
        ),
        ({"kind": "git", "url": "https://example.com/r.git", "options": {"path": "../outside"}}, "invalid_option"),
        ({"kind": "git", "url": "https://example.com/r.git", "options": {"depth": 3}}, "invalid_option"),
    ],
)
def test_git_urls_and_options_are_checked(api_a, body, code, settings):
    settings.SOURCES_ALLOWED_HOSTS = []
    response = api_a.post("/api/v1/sources/", body)
    assert response.status_code == 400 and response.json()["error"]["code"] == code, response.content


class _GitHttpBackend:
    """Smart HTTP: `git http-backend` (CGI) behind http.server, on loopback."""

    def __init__(self, root):
        import http.server
        import threading

        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                backend.serve(self)

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.root = root
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self, handler):
        import os

        path, _, query = handler.path.partition("?")
        length = int(handler.headers.get("Content-Length") or 0)
        env = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": handler.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": handler.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(length),
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": handler.headers.get("Git-Protocol", ""),
        }
        body = handler.rfile.read(length) if length else b""
        if handler.headers.get("Content-Encoding") == "gzip":
            import gzip

            body = gzip.decompress(body)
            env["CONTENT_LENGTH"] = str(len(body))
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False).stdout
        head, _, payload = out.partition(b"\r\n\r\n") if b"\r\n\r\n" in out else out.partition(b"\n\n")
        headers = [line.split(b": ", 1) for line in head.splitlines() if b": " in line]
        status = next((int(v.split()[0]) for k, v in headers if k.lower() == b"status"), 200)
        handler.send_response(status)
        for key, value in headers:
            if key.lower() != b"status":
                handler.send_header(key.decode(), value.decode())
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_git_over_http_connects_to_the_checked_address(api_a, repository, commit_and_run, monkeypatch, settings):
    """The host name does not resolve for git itself: only curl's resolve option, set to the
    address Groundwork checked, lets the clone connect (no second lookup to rebind)."""
    from sources import net

    work, _ = repository
    backend = _GitHttpBackend(work.parent)
    real = socket.getaddrinfo
    monkeypatch.setattr(
        net.socket,
        "getaddrinfo",
        lambda host, *a, **k: real("127.0.0.1" if host == "git.example.test" else host, *a, **k),
    )
    settings.SOURCES_ALLOWED_HOSTS = ["git.example.test"]
    try:
        url = f"http://git.example.test:{backend.port}/handbook/.git"
        created = commit_and_run(
            lambda: api_a.post("/api/v1/sources/", {"kind": "git", "url": url, "options": {"path": "docs"}})
        )
        source = api_a.get(f"/api/v1/sources/{created.json()['id']}/").json()
    finally:
        backend.close()
    assert source["status"] == "idle", source["error"]
    assert source["last_sync"]["added"] == 3
