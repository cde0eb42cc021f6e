from django.contrib import admin

from audit.models import AuditEntry
from core.admin_mixins import AccountFilter, AllAccountsMixin, ReadOnlyMixin


@admin.register(AuditEntry)
class AuditEntryAdmin(AllAccountsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("created_at", "account", "actor_kind", "actor_label", "action", "target")
    list_filter = (AccountFilter, "action", "actor_kind")
    search_fields = ("actor_label", "target")
    list_select_related = ("account",)
    ordering = ("-created_at", "-id")
    fields = ("created_at", "account", "actor_kind", "actor_id", "actor_label", "action", "target", "detail")
    readonly_fields = fields
