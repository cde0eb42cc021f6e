"""Fair ingestion: account A floods the queue, then account B uploads one
36-byte text file; how long does B wait for it to be ready?

Real rq workers (`manage.py rqworker default --with-scheduler` subprocesses, 1 and then 2)
on the bench database and the Redis of REDIS_URL (its `default` queue is emptied first:
give the bench a Redis database of its own), a zero-cost fake embedding server (so the
time is the pipeline's: parse in the sandbox, chunk, stage, publish). A's flood is
FLOOD small DOCX documents (a few pages of prose each); the workers are started and, as
soon as each has taken one of A's documents, B uploads.

Each worker count runs twice, under the same load: "fifo" re-creates the queueing before
fair ingestion (a job per document, naming it: `jobs.ingest_document`, taken in the order
queued), "fair" is today's (`jobs.ingest_next_document`, documents/ingestion_queue.py).

Reports, per run: B's time from upload to ready, B's place in the order of completion
(1 = first), how long A's whole flood took and the seconds per document.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time

FLOOD = int(os.environ.get("BENCH_FAIRNESS_FLOOD", "40"))


def _docx(index: int) -> bytes:
    import docx

    from documents.tests.files import prose_page

    document = docx.Document()
    document.core_properties.title = f"Flood {index}"
    for page in range(1, 4):
        document.add_heading(f"Part {page} of document {index}", level=1)
        for line in prose_page(page * 100 + index, sentences=12).splitlines():
            document.add_paragraph(line)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _upload(account, name: str, data: bytes, content_type: str):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from core.tenancy import account_context
    from documents.services import document_upload

    with account_context(account):
        document, _ = document_upload(
            account=account, actor=None, upload=SimpleUploadedFile(name, data, content_type=content_type)
        )
    return document


def _status(account, document_id: int) -> str:
    from core.tenancy import account_context
    from documents.models import Document

    with account_context(account):
        return Document.objects.for_account(account).values_list("status", flat=True).get(pk=document_id)


def _taken(account) -> int:
    from core.tenancy import account_context
    from documents.models import Document

    with account_context(account):
        return Document.objects.for_account(account).filter(status__in=["processing", "ready"]).count()


def _waiting(account) -> int:
    from core.tenancy import account_context
    from documents.models import Document

    with account_context(account):
        return Document.objects.for_account(account).filter(status__in=["pending", "processing"]).count()


def _retried(queue) -> int:
    """Jobs of this run that failed once and were retried (rq keeps finished jobs a while)."""
    ids = queue.finished_job_registry.get_job_ids() + queue.scheduled_job_registry.get_job_ids()
    jobs = [queue.fetch_job(job_id) for job_id in ids]
    return sum(1 for job in jobs if job is not None and job.retries_left is not None and job.retries_left < 3)


def _ready_times(account) -> list:
    from core.tenancy import account_context
    from documents.models import Document

    with account_context(account):
        return list(Document.objects.for_account(account).filter(status="ready").values_list("heartbeat_at", flat=True))


def _account(label: str):
    from accounts.models import User
    from accounts.services import account_create

    owner = User.objects.create_user(email=f"bench-fair-{label}-{time.time_ns()}@bench.test", password=None)
    return account_create(name=f"bench fairness {label}", owner=owner, initial_credits=10_000_000)


@contextlib.contextmanager
def _scheme(name: str):
    """ "fair": the code as it is. "fifo": uploads enqueue a job per document that names it,
    as before fair ingestion (documents.services calls jobs.enqueue_ingest)."""
    from documents import jobs

    fair = jobs.enqueue_ingest
    if name == "fifo":
        jobs.enqueue_ingest = lambda document: jobs._enqueue(
            jobs.ingest_document, document_id=document.pk, revision=document.revision, account_id=document.account_id
        )
    try:
        yield
    finally:
        jobs.enqueue_ingest = fair


def _one_run(workers: int, base_url: str) -> dict:
    import django_rq

    from config.embedded import BASE_DIR

    queue = django_rq.get_queue("default")
    queue.empty()
    for registry in (queue.finished_job_registry, queue.failed_job_registry, queue.scheduled_job_registry):
        for job_id in registry.get_job_ids():
            registry.remove(job_id, delete_job=True)
    flooder, other = _account("A"), _account("B")
    stamp = time.time_ns()
    for i in range(FLOOD):
        _upload(
            flooder,
            f"flood-{i}.docx",
            _docx(i),
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        )
    env = dict(os.environ, LLM_BASE_URL=base_url, LLM_BUNDLED="0", WORKER_PROCESSES="1")
    started = time.perf_counter()
    # Workers as `make run` starts them (with rq's scheduler, so a job that failed on a
    # transient error, e.g. no free PostgreSQL connection on a busy machine, is retried after
    # its backoff); stopped once everything is ready.
    processes = [
        subprocess.Popen(
            [sys.executable, "manage.py", "rqworker", "default", "--with-scheduler"],
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    try:
        # B uploads once every worker has taken one of A's documents (so the wait below is
        # the jobs already running plus B's own, never the workers' start-up).
        while _taken(flooder) < workers:
            time.sleep(0.02)
        uploaded = time.perf_counter()
        small = _upload(other, "small.txt", f"A 36-byte text file {stamp % 10**6:06d}.".encode()[:36], "text/plain")
        while _status(other, small.pk) != "ready":
            time.sleep(0.02)
        b_wait = time.perf_counter() - uploaded
        deadline = time.monotonic() + 600
        while _waiting(flooder) and time.monotonic() < deadline:
            time.sleep(0.1)
        flood_s = time.perf_counter() - started
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    flood_ready = _ready_times(flooder)
    (b_ready,) = _ready_times(other)
    retried = _retried(queue)
    return {
        "workers": workers,
        "b_seconds_to_ready": round(b_wait, 2),
        "b_place_in_completion_order": 1 + sum(1 for at in flood_ready if at < b_ready),
        "flood_documents": FLOOD,
        "flood_seconds": round(flood_s, 1),
        "seconds_per_flood_document": round(flood_s / FLOOD, 2),
        "jobs_retried_after_an_error": retried,
        "flood_documents_not_ready": FLOOD - len(flood_ready),
    }


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _forget_leftovers() -> None:
    """Documents an interrupted earlier run left pending would be served first (their
    accounts were served least recently): the bench database is the bench's own, so they fail."""
    from core.tenancy import dangerously_bypass_tenancy
    from documents.models import Document

    with dangerously_bypass_tenancy(reason="bench ingestion_fairness: fail an interrupted run's documents"):
        Document.all_accounts.filter(status__in=["pending", "processing"]).update(
            status="failed", error_code="bench_leftover"
        )


def run() -> dict:
    from llm.fake_server import FakeOpenAIServer

    _forget_leftovers()
    results = []
    with FakeOpenAIServer() as fake:
        for workers in (1, 2):
            for scheme in ("fifo", "fair"):
                load_before = _load()
                with _scheme(scheme):
                    row = {"scheme": scheme, **_one_run(workers, fake.base_url)}
                row["load_average_before_after"] = f"{load_before} / {_load()}"
                results.append(row)
    return {
        "runs": results,
        "settings": f"FLOOD={FLOOD} DOCX (3 pages of prose each) from A, then one 36-byte .txt from B "
        "once every worker has taken one of A's; zero-cost fake embedding server",
    }
