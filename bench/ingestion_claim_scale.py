"""Fair ingestion at scale: how long does a worker take to claim the next
document when thousands of accounts have documents waiting?

`documents.ingestion_queue.claim_next()` runs under one advisory lock, so every worker's
claim waits for the one before it. It ranked every account with a pending document (the
fewest in flight first, then the least recently served), so its cost grew with the number of
waiting accounts; it now reads the fairest accounts' lanes through an index
(documents.models.IngestionLane). This bench makes CLAIM_SCALE_ACCOUNTS accounts (2,000) with CLAIM_SCALE_PENDING
pending documents each (5; rows only, no files: nothing is ingested) and a tenth of them
with a document in flight, then times CLAIM_SCALE_CLAIMS (300) real claims one after
another, and hands the claimed documents back (pending) so the next run starts the same.
The accounts are kept in the bench database and reused.
"""

from __future__ import annotations

import os
import time


def _accounts(count: int, pending: int) -> list[int]:
    from django.db import connection
    from django.utils import timezone

    from accounts.models import Account, User
    from accounts.services import account_create
    from core.tenancy import dangerously_bypass_tenancy
    from documents.models import Collection, Document, Status

    prefix = "bench-claim-"
    with dangerously_bypass_tenancy(reason="bench: accounts for the claim at scale"):
        have = list(Account.objects.filter(slug__startswith=prefix).order_by("pk").values_list("pk", flat=True))
    for i in range(len(have), count):
        owner = User.objects.create_user(email=f"{prefix}{i}-{time.time_ns()}@bench.test", password=None)
        have.append(account_create(name=f"claim {i}", owner=owner, slug=f"{prefix}{i}", initial_credits=0).pk)
    have = have[:count]
    with dangerously_bypass_tenancy(reason="bench: pending documents for the claim at scale"):
        collections = dict(
            Collection.all_accounts.filter(account_id__in=have)
            .order_by("account_id", "pk")
            .values_list("account_id", "pk")
            .distinct("account_id")
        )
        with_docs = set(Document.all_accounts.filter(account_id__in=have).values_list("account_id", flat=True))
        rows = [
            Document(
                account_id=a,
                collection_id=collections[a],
                name=f"waiting-{n}.txt",
                kind="txt",
                content_type="text/plain",
                size=10,
                sha256=f"{n:064x}",
                file="bench/none.txt",
                status=Status.PENDING,
            )
            for a in have
            if a not in with_docs
            for n in range(pending)
        ]
        rows += [
            Document(
                account_id=a,
                collection_id=collections[a],
                name="in-flight.txt",
                kind="txt",
                content_type="text/plain",
                size=10,
                sha256="f" * 64,
                file="bench/none.txt",
                status=Status.PROCESSING,
                heartbeat_at=timezone.now(),
            )
            for i, a in enumerate(have)
            if a not in with_docs and i % 10 == 0
        ]
        Document.all_accounts.bulk_create(rows, batch_size=2000)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE documents_document")
    return have


def run() -> dict:
    from django.db import transaction
    from django.utils import timezone

    from bench.common import percentile
    from core.tenancy import dangerously_bypass_tenancy
    from documents.ingestion_queue import claim_next
    from documents.models import Document, IngestionLane, Status

    count = int(os.environ.get("CLAIM_SCALE_ACCOUNTS", "2000"))
    pending = int(os.environ.get("CLAIM_SCALE_PENDING", "5"))
    claims = int(os.environ.get("CLAIM_SCALE_CLAIMS", "300"))
    accounts = _accounts(count, pending)
    with dangerously_bypass_tenancy(reason="bench: count what waits"):
        waiting = Document.all_accounts.filter(status=Status.PENDING).values("account_id").distinct().count()
    timings, claimed, order = [], [], []
    try:
        for _ in range(claims):
            started = time.perf_counter()
            with transaction.atomic():
                document = claim_next()
            timings.append((time.perf_counter() - started) * 1000)
            if document is None:
                break
            claimed.append(document.pk)
            order.append(document.account_id)
    finally:
        with dangerously_bypass_tenancy(reason="bench: hand the claimed documents back"):
            Document.all_accounts.filter(pk__in=claimed).update(
                status=Status.PENDING, heartbeat_at=None, attempts=0, updated_at=timezone.now()
            )
            IngestionLane.all_accounts.filter(account_id__in=order).update(served_at=None)
    return {
        "accounts": len(accounts),
        "accounts_waiting": waiting,
        "claims": len(timings),
        "claim_ms": {
            "p50": round(percentile(timings, 50), 2),
            "p95": round(percentile(timings, 95), 2),
            "max": round(max(timings), 2),
        },
        "claims_per_s_one_after_another": round(len(timings) / (sum(timings) / 1000), 1),
        # Fair: no account served twice while another waits with nothing in flight.
        "distinct_accounts_served": len(set(order)),
        "load_average": os.getloadavg()[0],
        "settings": f"{count} accounts x {pending} pending documents, every 10th with one in flight; "
        f"{claims} claims one after another (rows only, nothing ingested)",
    }
