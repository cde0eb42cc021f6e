"""Sources: places documents come from (a web site, a Git repository), each synced into the
knowledge base, with the items it brought in and the history of its syncs."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.fair_queue import FairLane, fairest_index
from core.tenancy import TenantModel
from sources.kinds import kind_choices

DEFAULT_MAX_PAGES = 50


class Schedule(models.TextChoices):
    HOURLY = "hourly", "Every hour"
    DAILY = "daily", "Every day"


class SourceStatus(models.TextChoices):
    IDLE = "idle", "Idle"
    SYNCING = "syncing", "Syncing"
    FAILED = "failed", "Failed"


class Source(TenantModel):
    # One of the registry's kinds (sources/kinds/__init__.py), which also validates `options`.
    kind = models.CharField(max_length=16, choices=kind_choices)
    url = models.CharField(max_length=2000)
    max_pages = models.PositiveIntegerField(default=DEFAULT_MAX_PAGES)
    # Kind-specific settings (git: "branch", "path"); validated by the kind's module.
    options = models.JSONField(default=dict, blank=True)
    # Tags given to the documents this source brings in (when documents carry tags).
    tags = models.JSONField(default=list, blank=True)
    schedule = models.CharField(max_length=8, choices=Schedule.choices, blank=True, default="")
    next_sync_at = models.DateTimeField(null=True, blank=True, db_index=True)
    status = models.CharField(max_length=8, choices=SourceStatus.choices, default=SourceStatus.IDLE)
    error = models.TextField(blank=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)
    # Set by DELETE: gone from every list at once; a job deletes its documents, then the row.
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["account", "-created_at"], name="source_account_recent")]

    def __str__(self):
        return self.url

    @property
    def uploaded_by_id(self):
        """Who added it, as accounts.permissions reads an owned thing (a member deletes only
        the sources they added, as with documents)."""
        return self.created_by_id


class SourceItem(TenantModel):
    """One page or file of a source, the document it became, and what the last sync saw of
    it: validators for a conditional request, the hash of its text, and (for a web page) the
    links it had, so a page answered 304 still leads to the pages it links to."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="items")
    key = models.CharField(max_length=2000)
    url = models.CharField(max_length=2000, blank=True)
    title = models.CharField(max_length=255, blank=True)
    document = models.ForeignKey(
        "documents.Document", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # False when the same text was already a document of the account (uploaded by someone, or
    # by another source): that document is not this source's to delete.
    owns_document = models.BooleanField(default=True)
    etag = models.CharField(max_length=500, blank=True)
    last_modified = models.CharField(max_length=100, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    links = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source", "key"], name="source_item_key_unique")]


class SyncStatus(models.TextChoices):
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class SourceSync(TenantModel):
    """One run of a source's sync: what it added, updated, removed and left unchanged."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="syncs")
    trigger = models.CharField(max_length=16, default="manual")
    status = models.CharField(max_length=12, choices=SyncStatus.choices, default=SyncStatus.RUNNING)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    added = models.PositiveIntegerField(default=0)
    updated = models.PositiveIntegerField(default=0)
    removed = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    bytes_fetched = models.BigIntegerField(default=0)
    error = models.TextField(blank=True)
    # Pages or files that could not be read this time (kept as they were), for the history.
    problems = models.JSONField(default=list, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["source", "-started_at"], name="source_sync_recent"),
            # Syncs queued or in flight (the fair claim's and the sweeper's reads).
            models.Index(fields=["account", "id"], condition=models.Q(status="running"), name="source_sync_running"),
        ]
        constraints = [
            # No two syncs of one source at once (services.source_sync_request takes the row lock).
            models.UniqueConstraint(
                fields=["source"], condition=models.Q(status="running"), name="source_one_running_sync"
            ),
        ]


class SyncLane(FairLane):
    """An account's place in the fair queue of syncs (sources/sync_queue.py, by the rule of
    core/fair_queue.py): `waiting` while the account has a sync queued (set by
    services.source_sync_request in the sync's transaction, cleared by the claim once none
    is left), `served_at` its last fair claim."""

    class Meta:
        indexes = [fairest_index("source_sync_lane_fairest")]
