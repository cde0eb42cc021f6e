"""Scheduled syncs (config/cron.py runs `sync_due_sources` every minute)."""

from __future__ import annotations

from django.utils import timezone

from core.tenancy import account_context, dangerously_bypass_tenancy
from sources.jobs import top_up_sync_jobs
from sources.models import Source, SourceStatus
from sources.services import source_sync_request
from sources.sync import stale_syncs_fail


def sync_due_sources() -> int:
    """Cron: fail syncs whose worker died, queue a job again for each queued sync that lost
    its own, then start every sync a schedule makes due. Returns how many were started,
    failed or queued again.

    Run once even if two cron processes run it at the same minute: source_sync_request
    takes the source's row lock and starts a sync only when the source is still due and
    not syncing, and starting one moves next_sync_at on, so the second finds nothing to do."""
    failed = stale_syncs_fail() + top_up_sync_jobs()
    now = timezone.now()
    with dangerously_bypass_tenancy(reason="sources: find sources whose scheduled sync is due"):
        due = list(
            Source.all_accounts.filter(deleted_at__isnull=True, next_sync_at__lte=now)
            .exclude(schedule="")
            .exclude(status=SourceStatus.SYNCING)
            .order_by("next_sync_at")
            .values_list("account_id", "pk")[:500]
        )
    started = 0
    for account_id, source_id in due:
        with account_context(account_id=account_id):
            source = Source.objects.for_account(account_id).filter(pk=source_id).first()
            if source is not None and source_sync_request(
                account=source.account, source=source, trigger="schedule", only_if_due=True
            ):
                started += 1
    return failed + started
