"""The server cannot be made to buffer a huge body.

A body over the endpoint's limit is refused from its Content-Length before anything reads
it (413, JSON on the API, a plain page elsewhere), and a body without one (chunked) is cut
off as soon as it passes the limit, before authentication. Upload endpoints allow
MAX_UPLOAD_BYTES plus multipart overhead; every other endpoint REQUEST_MAX_BYTES.

The fast tests drive the Django middleware (WSGI, the test client) and the ASGI wrapper;
the slow ones start the real ASGI app under daphne and send 200 MB from a raw socket,
watching the daphne process's resident memory.
"""

from __future__ import annotations

import asyncio
import io
import json
import select
import socket
import time

import pytest

from accounts.tests.factories import make_api_key
from core.limits import BodySizeLimit, body_limit_for

pytestmark = pytest.mark.system

MB = 1024 * 1024


# --- which limit where ---------------------------------------------------------------------


def test_upload_endpoints_allow_an_upload_and_everything_else_a_small_body(settings):
    settings.MAX_UPLOAD_BYTES, settings.REQUEST_MAX_BYTES = 25 * MB, 1 * MB
    for path in ("/api/v1/documents/", "/documents/upload/"):
        assert 25 * MB < body_limit_for(path) <= 26 * MB
    for path in ("/api/v1/chat/", "/v1/chat/completions", "/login/", "/api/v1/documents/7/", "/signup/"):
        assert body_limit_for(path) == 1 * MB


# --- Django middleware (WSGI and the test client) -----------------------------------------


def test_a_2_8_mb_json_body_is_413_on_the_api_before_authentication(client, db):
    body = json.dumps({"message": "x" * (2_800_000)})
    for path in ("/api/v1/chat/", "/api/v1/search/", "/v1/chat/completions"):
        response = client.post(path, body, content_type="application/json")  # no credentials at all
        assert response.status_code == 413, (path, response.content[:200])
        assert response.json()["error"]["code"] == "too_large"


def test_an_oversized_declared_upload_is_413_without_credentials(client, db):
    # The test client sends the real (small) body; the declared length alone must decide.
    response = client.generic(
        "POST",
        "/api/v1/documents/",
        b"x" * 10,
        content_type="multipart/form-data; boundary=b",
        CONTENT_LENGTH=str(300 * MB),
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"


def test_login_page_refuses_a_large_form_with_a_plain_page(client, db):
    response = client.post("/login/", {"username": "a@b.test", "password": "x" * (2 * MB)})
    assert response.status_code == 413
    assert response["Content-Type"].startswith("text/html")


def test_an_upload_over_the_small_limit_but_within_max_upload_bytes_is_accepted(client, account_a, settings, fake_llm):
    settings.REQUEST_MAX_BYTES = 1 * MB
    key = make_api_key(account_a)
    data = io.BytesIO(b"Holiday policy. " * (2 * MB // 16))
    data.name = "big.txt"
    response = client.post("/api/v1/documents/", {"file": data}, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 202, response.content[:300]


# --- the ASGI wrapper (any ASGI server) ---------------------------------------------------


def _run_asgi(path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]]):
    """Drive BodySizeLimit around an app that reads the whole body; returns (sent messages,
    bytes the app received, how many chunks were pulled from the client)."""
    received = {"bytes": 0}
    pulled = {"n": 0}

    async def app(scope, receive, send):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            received["bytes"] += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive():
        i = pulled["n"]
        pulled["n"] += 1
        return {"type": "http.request", "body": chunks[i], "more_body": i < len(chunks) - 1}

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": headers, "query_string": b""}
    asyncio.run(BodySizeLimit(app)(scope, receive, send))
    return sent, received["bytes"], pulled["n"]


def test_asgi_wrapper_refuses_from_content_length_without_reading(settings):
    settings.REQUEST_MAX_BYTES = 1 * MB
    sent, got, pulled = _run_asgi("/api/v1/chat/", [b"x" * MB] * 3, [(b"content-length", str(3 * MB).encode())])
    assert sent[0]["status"] == 413 and pulled == 0 and got == 0
    assert json.loads(sent[1]["body"])["error"]["code"] == "too_large"


def test_asgi_wrapper_cuts_off_a_chunked_body_past_the_limit(settings):
    settings.REQUEST_MAX_BYTES = 1 * MB
    chunks = [b"x" * (256 * 1024)] * 200  # 50 MB, no Content-Length
    sent, got, pulled = _run_asgi("/login/", chunks, [])
    assert sent[0]["status"] == 413 and pulled <= 5 and got <= 1 * MB
    assert dict(sent[0]["headers"])[b"content-type"].startswith(b"text/html")


def test_asgi_wrapper_passes_a_body_within_the_limit(settings):
    settings.REQUEST_MAX_BYTES = 1 * MB
    sent, got, _ = _run_asgi("/api/v1/chat/", [b"x" * 1000] * 3, [])
    assert sent[0]["status"] == 200 and got == 3000


# --- the real thing: daphne, a raw socket, 200 MB -----------------------------------------


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


@pytest.fixture(scope="module")
def daphne(session_daphne):
    process, port = session_daphne
    return process.pid, port


def _send_huge(port: int, path: str, total: int, *, chunked: bool) -> tuple[bytes, int]:
    """POST `total` bytes generated as they are sent; stop sending once the server answers.
    Returns (the response's first bytes, how many body bytes were sent)."""
    piece = b"-" * (64 * 1024)
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: multipart/form-data; boundary=xyz"]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}")
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sent = 0
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        sock.settimeout(5)
        while sent < total:
            if select.select([sock], [], [], 0)[0]:
                break  # the server has answered (or closed): stop sending
            data = (b"%x\r\n" % len(piece)) + piece + b"\r\n" if chunked else piece
            try:
                sock.sendall(data)
            except (TimeoutError, BrokenPipeError, ConnectionResetError):
                break  # the server stopped reading: its answer is waiting
            sent += len(piece)
        sock.settimeout(30)
        try:
            return sock.recv(4096), sent
        except ConnectionResetError:
            return b"", sent
    finally:
        sock.close()


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/api/v1/documents/", "/login/"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_daphne_refuses_200_mb_with_flat_memory(daphne, path, chunked):
    pid, port = daphne
    before = _rss_kb(pid)
    started = time.monotonic()
    response, sent = _send_huge(port, path, 200 * MB, chunked=chunked)
    grown_mb = (_rss_kb(pid) - before) / 1024
    print(
        f"{path} chunked={chunked}: sent {sent / MB:.1f} MB, RSS +{grown_mb:.1f} MB, {time.monotonic() - started:.2f} s"
    )
    assert response.startswith(b"HTTP/1.1 413"), response[:300]
    assert grown_mb < 100, f"daphne grew by {grown_mb:.0f} MB"
    limit_mb = body_limit_for(path) / MB
    assert sent / MB < limit_mb + 64, f"the server read {sent / MB:.0f} MB before refusing"
    if path.startswith("/api/"):
        assert b'"too_large"' in response or b"application/json" in response
