"""Ingestion throughput on real documents, split by stage, with two embedding servers:
the bundled local MiniLM model, and a zero-cost fake (so the pipeline's own overhead shows).

Documents: the 26-page Debian camlidl manual (a real PDF) three times (bytes varied so
they are distinct documents) and a generated 100-page PDF. Stages are timed by calling the
pipeline's steps in order, exactly as the job does.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from config.embedded import BASE_DIR

PDF = "application/pdf"


# BENCH_INGESTION_MODELS: the local embedding models timed (comma-separated, each in its own
# account). BENCH_INGESTION_QUICK=1: the manual once and 20 generated pages (a loaded 2-core
# machine embeds ~1 e5 chunk a second).
MODELS = [m for m in os.environ.get("BENCH_INGESTION_MODELS", "all-minilm-l6-v2,multilingual-e5-small").split(",") if m]
QUICK = os.environ.get("BENCH_INGESTION_QUICK", "") == "1"


def _documents() -> list[tuple[str, bytes]]:
    from documents.tests.files import DEBIAN_PDF, make_pdf, prose_page

    manual = DEBIAN_PDF.read_bytes()
    copies, pages = (1, 20) if QUICK else (3, 100)
    docs = [(f"camlidl-{i}.pdf", manual + f"\n% copy {i} {time.time()}\n".encode()) for i in range(copies)]
    docs.append(
        (
            f"generated-{pages}.pdf",
            make_pdf([prose_page(n, sentences=14) for n in range(1, pages + 1)]) + f"\n% {time.time()}\n".encode(),
        )
    )
    return docs


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalModels:
    def __enter__(self):
        self.port = _free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llm.local_server", "--port", str(self.port)],
            cwd=BASE_DIR,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self

    def __exit__(self, *exc):
        self.process.terminate()
        self.process.wait(10)


def _ingest_timed(account, name: str, data: bytes) -> dict:
    from core.tenancy import account_context
    from documents import ingestion
    from documents.services import document_upload

    started = time.perf_counter()
    with account_context(account):
        document, _ = document_upload(
            account=account, actor=None, upload=SimpleUploadedFile(name, data, content_type=PDF)
        )
    upload_s = time.perf_counter() - started
    document = ingestion._claim(account.pk, document.pk, document.revision)
    t0 = time.perf_counter()
    drafts = ingestion._parse_and_chunk(document)
    t1 = time.perf_counter()
    ingestion._check_credits(document, drafts)
    batches = ingestion._embed_all(document, drafts)
    t2 = time.perf_counter()
    ingestion._publish(document, drafts, batches)
    t3 = time.perf_counter()
    with account_context(account):
        document.refresh_from_db()
    return {
        "pages": document.page_count or 0,
        "chunks": len(drafts),
        "bytes": len(data),
        "upload": upload_s,
        "parse_chunk": t1 - t0,
        "embed": t2 - t1,
        "publish": t3 - t2,
        "status": document.status,
    }


def _run_with(base_url: str, label: str) -> dict:
    from accounts.models import User
    from accounts.services import account_create

    settings.LLM_BASE_URL = base_url
    owner = User.objects.create_user(email=f"bench-ingest-{time.time_ns()}@bench.test", password=None)
    account = account_create(name="bench ingestion", owner=owner, initial_credits=10_000_000)
    rows = [_ingest_timed(account, name, data) for name, data in _documents()]
    assert all(r["status"] == "ready" for r in rows), rows
    total = {
        k: sum(r[k] for r in rows) for k in ("pages", "chunks", "bytes", "upload", "parse_chunk", "embed", "publish")
    }
    wall = total["upload"] + total["parse_chunk"] + total["embed"] + total["publish"]
    overhead = total["upload"] + total["parse_chunk"] + total["publish"]
    return {
        "embedding_server": label,
        "documents": len(rows),
        "pages": total["pages"],
        "chunks": total["chunks"],
        "pages_per_s": round(total["pages"] / wall, 1),
        "chunks_per_s": round(total["chunks"] / wall, 1),
        "mb_per_s": round(total["bytes"] / wall / 1e6, 3),
        "seconds": {k: round(total[k], 2) for k in ("upload", "parse_chunk", "embed", "publish")},
        "pipeline_overhead_vs_embedding": f"{100 * overhead / total['embed']:.1f}%",
    }


def run() -> dict:
    from llm import client as llm
    from llm.fake_server import FakeOpenAIServer

    with FakeOpenAIServer() as fake:
        zero_cost = _run_with(fake.base_url, "zero-cost fake (deterministic vectors, no model)")
    real = {}
    with LocalModels() as local:
        for model in MODELS:
            settings.EMBEDDING_MODEL = model  # the new account's model (documents.embedding)
            real[model] = _run_with(local.base_url, f"local {model} (2 threads)")
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {
        "local_models": real,
        "zero_cost": zero_cost,
        "peak_rss_mb": {
            "worker_process": round(peak_self),
            "largest_child (parser sandbox or model server)": round(peak_children),
        },
        "settings": f"CHUNK_SIZE={settings.CHUNK_SIZE}, CHUNK_OVERLAP={settings.CHUNK_OVERLAP}, batch {llm.EMBEDDING_BATCH_LIMIT}, "
        f"EMBEDDING_CONCURRENCY={settings.EMBEDDING_CONCURRENCY}",
    }


__all__ = ["run", "Path"]
