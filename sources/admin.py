"""Support staff: sources with their status and last error, and their syncs, read-only
(sources are added, synced and deleted by their account's people)."""

from django.contrib import admin

from core.admin_mixins import AccountFilter, AllAccountsMixin, ReadOnlyMixin
from sources.models import Source, SourceSync


@admin.register(Source)
class SourceAdmin(AllAccountsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("url", "kind", "account", "status", "schedule", "last_synced_at", "error")
    list_filter = (AccountFilter, "kind", "status", "schedule")


@admin.register(SourceSync)
class SourceSyncAdmin(AllAccountsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("source", "account", "status", "started_at", "added", "updated", "removed", "unchanged", "error")
    list_filter = (AccountFilter, "status")
