"""Faults survived, each with the real part stopped or killed, on a private
installation (config/tests/faults.py: `make run`'s supervisor on a data folder of its own):

- PostgreSQL restarted while a document is being embedded, and while a chat answer streams;
- Redis killed (a crash: queued jobs are lost) and started again: uploads meanwhile still
  answer and are ingested once it is back, login is refused with a clear message while it is
  down, chat and the API keep working, the workers and cron are started again;
- the model server's connection cut mid-answer (what a killed server does to a stream): the
  turn fails with `provider_unavailable`, the hold is released, the socket stays usable;
- the media disk full: 507 `storage_full`, no row, no partial file.

After each, nothing is lost: bench.soak's reconciliation (every debit matched to its usage,
no hold open, every document ready or failed with a reason, balance = ledger) passes.
docs/operations/reliability.md says, fault by fault, what a person sees and how it recovers.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from config.tests.faults import PASSWORD, GatedBackend, Stack
from llm.fake_server import FakeOpenAIServer

pytestmark = [pytest.mark.system, pytest.mark.slow]

MEDIA_MB = 4  # the media folder's disk: a tmpfs this small, where mounting one is allowed


def _prose(topic: str, paragraphs: int) -> bytes:
    return "\n\n".join(
        f"# {topic} {i}\n\nThe {topic} policy, part {i}, says that requests about {topic} go to the "
        f"team lead, who answers within {i + 2} days; exceptions are written down. " * 3
        for i in range(paragraphs)
    ).encode()


def _mount_small_disk(path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={MEDIA_MB}m", "tmpfs", str(path)], capture_output=True, text=True
    )
    return result.returncode == 0


@pytest.fixture(scope="module")
def model():
    server = FakeOpenAIServer()
    server.backend = backend = GatedBackend()
    with server:
        yield server, backend


@pytest.fixture(scope="module")
def stack(model, tmp_path_factory):
    base = tmp_path_factory.mktemp("faults")
    media = base / "media"
    small_disk = _mount_small_disk(media)
    running = Stack(
        base / "data", model[0], MEDIA_ROOT=media, DOCUMENT_STALE_SECONDS=20, EMBEDDING_CONCURRENCY=1, LOG_LEVEL="INFO"
    )
    running.small_disk = small_disk
    try:
        running.wait_running()
        running.create_account()
        yield running
    finally:
        running.stop()
        if small_disk:
            subprocess.run(["umount", "-l", str(media)], capture_output=True)


@pytest.fixture
def backend(model):
    model[1].reset()
    yield model[1]
    model[1].release.set()  # nothing waits past its test
    model[1].reset()


def _ingested(stack: Stack, topic: str) -> None:
    """A short document about `topic`, uploaded and ready."""
    status, document = stack.upload(f"{topic}.md", _prose(topic, 4))
    assert status == 202, document
    assert stack.wait_document(document["id"])["status"] == "ready"


def _reconciled(stack: Stack) -> dict:
    report = stack.reconcile()
    assert report["ok"], report["failures"]
    return report


def test_postgres_restarted_while_a_document_is_embedded(stack, backend):
    backend.hold_embeddings = True
    status, document = stack.upload("restart-during-ingestion.md", _prose("parking", 30))
    assert status == 202, document
    assert backend.embedding_waiting.wait(60), f"ingestion never reached the model:\n{stack.output()}"
    assert stack.document(document["id"])["status"] == "processing"

    stack.postgres_stop()  # every session is cut, the worker's included
    time.sleep(2)
    stack.postgres_start()
    backend.hold_embeddings = False
    backend.release.set()  # the worker gets its vectors back and finds its connection gone

    done = stack.wait_document(document["id"], timeout=180)
    assert done["status"] == "ready", (done, stack.output())
    assert done["chunk_count"] > 0
    status, found = stack.post_json("/api/v1/search/", {"query": "parking policy team lead"})
    assert status == 200 and any(r["document_id"] == document["id"] for r in found["results"]), found
    _reconciled(stack)  # embedded and charged once, no hold left


def test_postgres_restarted_while_an_answer_streams(stack, backend):
    _ingested(stack, "holiday")
    before = stack.balance()
    backend.hold_chat_after = 2

    restarted = []

    def restart_when_held():
        try:
            assert backend.chat_waiting.wait(60)
            stack.postgres_stop()
            time.sleep(2)
            stack.postgres_start()
            restarted.append(True)
        finally:
            backend.release.set()

    restarter = threading.Thread(target=restart_when_held)
    restarter.start()
    frames = stack.chat("Who answers holiday requests?")
    restarter.join(90)
    assert restarted, "PostgreSQL was not restarted"
    done = frames[-1]
    # The answer was generated while PostgreSQL restarted: it is stored and paid for once
    # the database is back (chat/driver.py, _settle), not lost.
    assert done["type"] == "chat.done", frames
    assert done["answer"] and done["usage"]["total_tokens"] > 0
    assert stack.balance() == done["credits_remaining"] < before
    status, conversation = stack.get(f"/api/v1/conversations/{done['conversation_id']}/")
    assert status == 200
    assert [m["role"] for m in conversation["messages"]][-2:] == ["user", "assistant"]
    assert conversation["messages"][-1]["content"] == done["answer"]
    _reconciled(stack)
    # And the next question simply works.
    assert stack.chat("Who answers holiday requests?")[-1]["type"] == "chat.done"


def test_model_server_cut_off_mid_answer(stack, backend):
    _ingested(stack, "expenses")
    before = stack.balance()
    backend.drop_chat_after = 3
    frames = stack.chat("Who answers expenses requests?")
    assert backend.chat_dropped.is_set()
    error = frames[-1]
    assert error["type"] == "chat.error" and error["code"] == "provider_unavailable", frames
    assert "try again" in error["message"].lower()
    assert [f["type"] for f in frames].count("chat.token") >= 1  # it really was mid-answer
    # What was generated is kept as a failed answer and charged (no usage came: counted as the
    # hold counts, llm.client.ChatStream._estimate); the rest of the hold is given back.
    sources = frames[0]
    status, conversation = stack.get(f"/api/v1/conversations/{sources['conversation_id']}/")
    answer = conversation["messages"][-1]
    assert answer["role"] == "assistant" and answer["status"] == "failed", answer
    assert answer["content"] and answer["usage"]["total_tokens"] > 0
    status, credits = stack.get("/api/v1/credits/")
    charge = next(e for e in credits["entries"] if e["kind"] == "chat")  # the newest first
    assert -charge["delta"] == charge["tokens"] == answer["usage"]["total_tokens"]  # 1 credit a token here
    # Besides it the turn paid only its query's embedding (a few tokens, drawn from the hold).
    assert 0 < before - credits["balance"] - answer["usage"]["total_tokens"] < 64
    _reconciled(stack)  # no hold left open
    backend.drop_chat_after = None
    assert stack.chat("Who answers expenses requests?")[-1]["type"] == "chat.done"


def test_redis_killed_and_started_again(stack, backend):
    argv = stack.redis_kill()
    try:
        # Uploads still answer: the file and its row are stored; its job waits for Redis.
        status, document = stack.upload("while-redis-was-down.md", _prose("badge", 3))
        assert status == 202, document
        # The API and its rate limit keep working (the limit fails open) ...
        status, found = stack.post_json("/api/v1/search/", {"query": "parking policy"})
        assert status == 200, found
        # ... sign-in does not (its attempt limits fail closed), with a message that says why.
        status, page = _login(stack)
        assert status == 429 and "cannot check sign-in attempts right now" in page, page[:2000]
        # Health says what is down.
        status, health = stack.get("/healthz", key=False)
        assert status == 503 and health["redis"] != "ok", health
    finally:
        stack.redis_start(argv)
    # The queue lost the upload's job; the sweeper gives the waiting document one once its
    # wait passes DOCUMENT_STALE_SECONDS (20 s here), on cron's next minute.
    done = stack.wait_document(document["id"], timeout=150)
    assert done["status"] == "ready", (done, stack.output())
    # Workers and cron that lost Redis were started again; chat works on a new socket.
    assert stack.chat("Who answers badge requests?")[-1]["type"] == "chat.done"
    status, health = stack.get("/healthz", key=False)
    assert status == 200 and health["workers"] >= 1, health
    status, page = _login(stack)  # the wrong password again: now refused as wrong, not as unavailable
    assert status == 200 and "cannot check sign-in attempts" not in page and "do not match an account" in page, page[
        :3000
    ]
    _reconciled(stack)


def test_media_disk_full(stack, backend):
    if not stack.small_disk:
        pytest.skip("mounting a small tmpfs for the media folder needs root")
    media = stack.env["MEDIA_ROOT"]
    files_before = sorted(_files(media))
    status, before = stack.get("/api/v1/documents/")
    too_big = b"The disk is full. " * (MEDIA_MB * 1024 * 1024 // 18 + 1000)  # larger than the disk
    status, body = stack.upload("too-big-for-the-disk.txt", too_big, "text/plain")
    assert status == 507, body
    assert body["error"]["code"] == "storage_full"
    assert "storage is full" in body["error"]["message"] and "nothing was added" in body["error"]["message"]
    assert sorted(_files(media)) == files_before  # no partial file
    status, after = stack.get("/api/v1/documents/")
    assert [d["id"] for d in after["results"]] == [d["id"] for d in before["results"]]  # no row
    # A file that fits still goes in.
    status, small = stack.upload("fits.md", _prose("printer", 2))
    assert status == 202, small
    assert stack.wait_document(small["id"])["status"] == "ready"
    _reconciled(stack)


def _files(root) -> list[str]:
    return [os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names]


def _login(stack: Stack) -> tuple[int, str]:
    """The login page as a browser posts it (its CSRF cookie first)."""
    import http.cookiejar
    import urllib.request

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(stack.url("/login/"), timeout=30) as response:
        response.read()
    token = next(c.value for c in jar if c.name == "csrftoken")
    body = urllib.parse.urlencode(
        {"username": "faults-owner@example.com", "password": "wrong-" + PASSWORD, "csrfmiddlewaretoken": token}
    ).encode()
    request = urllib.request.Request(
        stack.url("/login/"), data=body, method="POST", headers={"Referer": stack.url("/login/")}
    )
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
