"""A real rq worker killed mid-job: the sweeper re-queues the document, a new worker
finishes it, nothing is embedded or charged twice and no chunk is duplicated."""

import datetime as dt
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection

from billing.models import CreditLedgerEntry
from billing.services import credits_grant
from config.embedded import BASE_DIR
from core.tenancy import account_context
from documents.jobs import requeue_stale_work
from documents.models import Chunk, Document
from documents.services import document_upload
from llm.fake_server import FakeBackend, FakeOpenAIServer

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class BlockingSecondBatch(FakeBackend):
    """Answers the first embedding request, then holds the second until released."""

    def __init__(self):
        super().__init__()
        self.second_started = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        self.inputs: list[list[str]] = []

    def embeddings(self, body, texts):
        self.calls += 1
        self.inputs.append(list(texts))
        if self.calls == 2:
            self.second_started.set()
            self.release.wait(60)
        return super().embeddings(body, texts)


def _kill_worker_and_horse(worker: subprocess.Popen) -> None:
    """SIGKILL, mid-job. rq runs each job in a forked work horse in its own session, so the
    horse is found as a child, not through the process group."""
    for process in [psutil.Process(worker.pid), *psutil.Process(worker.pid).children(recursive=True)]:
        process.kill()


def _worker(env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "rqworker", "default", "--burst"],
        cwd=BASE_DIR,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _worker_env(base_url: str) -> dict:
    db = connection.settings_dict
    url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + db["NAME"]
    return dict(os.environ, DATABASE_URL=url, LLM_BASE_URL=base_url, EMBEDDING_CONCURRENCY="1", GROUNDWORK_TESTING="1")


def test_killed_worker_is_recovered_without_double_work(account_a, queue):
    paragraphs = [f"Paragraph {i} talks about topic {i} in words that fill the chunk. " * 9 for i in range(150)]
    data = "\n\n".join(paragraphs).encode()
    server = FakeOpenAIServer()
    server.backend = backend = BlockingSecondBatch()
    with server:
        with account_context(account_a):
            credits_grant(account=account_a, amount=100_000, reason="a long document")
            document, _ = document_upload(
                account=account_a, actor=None, upload=SimpleUploadedFile("long.txt", data, content_type="text/plain")
            )
        env = _worker_env(server.base_url)
        first = _worker(env)
        deadline = time.monotonic() + 90
        while not backend.second_started.wait(0.2) and first.poll() is None and time.monotonic() < deadline:
            pass
        if not backend.second_started.is_set():
            _kill_worker_and_horse(first)
            pytest.fail("the worker never reached the second batch:\n" + first.communicate(timeout=10)[0])
        # The first batch is staged while the second is being embedded (bounded concurrency).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with account_context(account_a):
                if Document.objects.for_account(account_a).get(pk=document.pk).progress_done >= 1:
                    break
            time.sleep(0.1)
        _kill_worker_and_horse(first)
        first.wait(10)
        backend.release.set()

        with account_context(account_a):
            crashed = Document.objects.for_account(account_a).get(pk=document.pk)
            assert crashed.status == "processing" and crashed.progress_done == 1
            # Time passes: the heartbeat goes stale.
            Document.objects.for_account(account_a).filter(pk=document.pk).update(
                heartbeat_at=crashed.created_at - dt.timedelta(hours=1)
            )
        assert requeue_stale_work() == 1

        second = _worker(env)
        output, _ = second.communicate(timeout=180)
        assert second.returncode == 0, output

    with account_context(account_a):
        done = Document.objects.for_account(account_a).get(pk=document.pk)
        assert done.status == "ready", (done.status, done.error)
        assert done.attempts == 2 and done.progress_total >= 2, (done.attempts, output)
        chunks = list(Chunk.objects.for_account(account_a).filter(document=done).values_list("chunk_index", flat=True))
        assert sorted(chunks) == list(range(done.chunk_count))
        debit = CreditLedgerEntry.objects.for_account(account_a).get(kind="embedding")
    # Batch 0 was staged before the crash: the retry embedded only batches 1.., once each
    # (batch 1 twice: the killed attempt never staged it).
    batches = backend.inputs
    assert batches.count(batches[0]) == 1
    assert batches[1] == batches[2] and len(batches) == done.progress_total + 1
    charged_batches = [batches[0]] + batches[2:]
    assert debit.tokens == done.embedding_tokens == sum(len(t.split()) for b in charged_batches for t in b)
