"""Writes for retrieval: moving an account to another embedding model."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from documents import jobs as document_jobs
from documents.models import ReindexRun
from retrieval.embedding_models import model_change


@transaction.atomic
def embedding_migration_start(*, account, actor) -> ReindexRun | None:
    """Start moving the account to EMBEDDING_MODEL (retrieval/embedding_models.py), after an
    owner or admin saw its credit estimate; they pay for it. At most one run per account: a
    running one (reindex or migration) is returned; None when there is nothing to migrate."""
    running = (
        ReindexRun.objects.for_account(account).select_for_update().filter(status=ReindexRun.RunStatus.RUNNING).first()
    )
    change = model_change(account=account)
    if running or change is None:
        return running
    run = ReindexRun.objects.for_account(account).create(
        account=account,
        kind=ReindexRun.RunKind.MIGRATION,
        embedding_model=change.target_model,
        embedding_dimensions=change.target_dimensions,
        total=change.documents,
        progress_total=change.batches,
        credits_estimate=change.credits_estimate,
        created_by=actor if getattr(actor, "pk", None) else None,
        heartbeat_at=timezone.now(),
    )
    audit_record(
        account=account,
        action="account.reindex",
        actor=actor,
        target=f"embedding migration {run.pk}",
        detail={
            "model": change.target_model,
            "dimensions": change.target_dimensions,
            "credits_estimate": change.credits_estimate,
        },
    )
    document_jobs.enqueue_reindex_run(run)
    return run
