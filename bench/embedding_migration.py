"""Changing the embedding model: time and credits of the migration for the Python FAQ.

The corpus: the 174 answers of /work/shared/eval/python_faq.jsonl, grouped into one text
document per FAQ file (`faq/design.rst.txt` ...), each answer under its question as a
heading, ingested into one account with model A (384-d); then EMBEDDING_MODEL is changed to
model B (256-d) and the migration runs as the worker runs it (retrieval.embedding_models).
The provider is the fake OpenAI-compatible server (llm/fake_server.py) serving both models,
so the times are the product's own work (batching, staging, charging, the switch), without
model compute; credits are the provider-reported tokens (the bundled model's tokenizer).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

FAQ = Path(os.environ.get("GROUNDWORK_EVAL_DIR", "/work/shared/eval")) / "python_faq.jsonl"
OLD, NEW, NEW_DIMS = "bench-model-a", "bench-model-b", 256


def _corpus() -> dict[str, str]:
    files = defaultdict(list)
    for line in FAQ.read_text().splitlines():
        row = json.loads(line)
        files[row["document"].replace("/", "__")].append(f"## {row['question']}\n\n{row['answer_section']}")
    return {name: "\n\n".join(parts) for name, parts in sorted(files.items())}


def run() -> dict:
    from django.conf import settings
    from django.core.files.uploadedfile import SimpleUploadedFile

    from accounts.models import User
    from accounts.services import account_create
    from core.tenancy import account_context
    from documents import jobs, services
    from documents.models import Document, ReindexRun
    from llm.fake_server import FakeOpenAIServer
    from retrieval import services as retrieval_services
    from retrieval.embedding_models import migration_run, model_change

    with FakeOpenAIServer() as server:
        server.backend.model_dimensions = {NEW: NEW_DIMS}
        settings.LLM_BASE_URL, settings.LLM_BUNDLED = server.base_url, False
        settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = OLD, 384
        owner = User.objects.create_user(email=f"bench-migration-{time.time_ns()}@bench.test", password=None)
        account = account_create(
            name="embedding migration bench",
            owner=owner,
            slug=f"bench-migration-{time.time_ns()}",
            initial_credits=100_000_000,
        )
        started = time.perf_counter()
        for name, text in _corpus().items():
            with account_context(account):
                document, _ = services.document_upload(
                    account=account,
                    actor=owner,
                    upload=SimpleUploadedFile(name, text.encode(), content_type="text/plain"),
                )
            jobs.ingest_document(account_id=account.pk, document_id=document.pk, revision=document.revision)
        ingest_s = time.perf_counter() - started
        settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = NEW, NEW_DIMS
        with account_context(account):
            change = model_change(account=account)
            run = retrieval_services.embedding_migration_start(account=account, actor=owner)
        started = time.perf_counter()
        migration_run(account_id=account.pk, run_id=run.pk)  # as the worker does (its job)
        migrate_s = time.perf_counter() - started
        with account_context(account):
            run = ReindexRun.objects.for_account(account).get(pk=run.pk)
            documents = Document.objects.for_account(account)
            chunks = sum(documents.values_list("chunk_count", flat=True))
            return {
                "corpus": f"Python FAQ answers ({FAQ.name}): {documents.count()} documents, {chunks} chunks",
                "ingest_s": round(ingest_s, 2),
                "migration_s": round(migrate_s, 2),
                "migration_status": run.status,
                "batches": run.progress_total,
                "credits_estimate": change.credits_estimate,
                "credits_charged": run.credits_charged,
                "ingestion_credits": sum(documents.values_list("credits_charged", flat=True)),
                "provider": "fake OpenAI-compatible server (no model compute)",
            }


__all__ = ["run"]
