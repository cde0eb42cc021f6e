"""Support staff: documents with their status and failure reason, reindex runs, and the
account page's documents. Documents are made by uploads, so the admin never edits one: it
reindexes or deletes through the services (jobs, credits, files), each action behind its
own permission and written to the admin log."""

from operator import attrgetter

from django.contrib import admin, messages
from django.db.models import Count
from django.template.defaultfilters import filesizeformat, truncatechars
from django.urls import reverse
from django.utils.html import format_html

from accounts.admin import AccountAdmin, Panel
from core.admin_mixins import (
    AccountFilter,
    AllAccountsMixin,
    ReadOnlyMixin,
    account_filter_url,
    html_table,
    record_action,
)
from core.errors import GroundworkError
from core.tenancy import account_context
from documents.models import Document, ReindexRun, Status
from documents.services import account_reindex_cancel, account_reindex_start, document_delete, document_reindex

RECENT_DOCUMENTS = 20


def _each_in_its_account(modeladmin, request, objects, service, done: str, account_of=attrgetter("account")) -> list:
    """Run `service(obj, account)` in each object's own account context; a refusal (e.g. not
    enough credits to reindex) is reported for that object and the others carry on."""
    succeeded = []
    for obj in objects:
        account = account_of(obj)
        try:
            with account_context(account):
                service(obj, account)
        except GroundworkError as exc:
            modeladmin.message_user(request, f"{obj}: {exc.message}", messages.ERROR)
            continue
        succeeded.append(obj)
    record_action(modeladmin, request, succeeded, done)
    if succeeded:
        modeladmin.message_user(request, f"{done} {len(succeeded)} selected.", messages.SUCCESS)
    return succeeded


@admin.register(Document)
class DocumentAdmin(AllAccountsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = (
        "name",
        "account",
        "status",
        "failure",
        "kind",
        "size_display",
        "chunk_count",
        "credits_charged",
        "created_at",
    )
    list_filter = ("status", AccountFilter, "kind")
    search_fields = ("name", "title", "sha256", "account__name", "account__slug", "error", "error_code")
    list_select_related = ("account",)
    ordering = ("-created_at",)
    fieldsets = (
        (
            None,
            {"fields": ("name", "title", "account", "uploaded_by", "kind", "content_type", "size", "sha256", "tags")},
        ),
        (
            "Status",
            {
                "fields": (
                    "status",
                    "error_code",
                    "error",
                    "attempts",
                    "revision",
                    "progress_done",
                    "progress_total",
                    "heartbeat_at",
                )
            },
        ),
        (
            "Index",
            {
                "fields": (
                    "page_count",
                    "chunk_count",
                    "token_count",
                    "embedding_tokens",
                    "credits_estimate",
                    "credits_charged",
                    "embedding_model",
                    "embedding_provider",
                )
            },
        ),
        ("Dates", {"fields": ("created_at", "updated_at")}),
    )
    readonly_fields = [f for _, opts in fieldsets for f in opts["fields"]]
    actions = ["reindex", "remove"]

    @admin.display(description="failure reason", ordering="error_code")
    def failure(self, document):
        if not (document.error or document.error_code):
            return ""
        return format_html(
            '<span title="{}">{}{}</span>',
            document.error,
            f"[{document.error_code}] " if document.error_code else "",
            truncatechars(document.error, 120),
        )

    @admin.display(description="size", ordering="size")
    def size_display(self, document):
        return filesizeformat(document.size)

    def has_reindex_permission(self, request):
        return request.user.has_perm("documents.change_document")

    def has_remove_permission(self, request):
        return request.user.has_perm("documents.delete_document")

    @admin.action(description="Reindex selected documents", permissions=["reindex"])
    def reindex(self, request, queryset):
        _each_in_its_account(
            self,
            request,
            queryset.select_related("account"),
            lambda d, account: document_reindex(account=account, document=d),
            "Reindex queued for",
        )

    @admin.action(description="Delete selected documents (chunks and file by a job)", permissions=["remove"])
    def remove(self, request, queryset):
        _each_in_its_account(
            self,
            request,
            queryset.select_related("account"),
            lambda d, account: document_delete(account=account, document=d),
            "Deleted",
        )


@admin.register(ReindexRun)
class ReindexRunAdmin(AllAccountsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("created_at", "account", "status", "done", "total", "embedding_model", "created_by", "finished_at")
    list_filter = ("status", AccountFilter)
    search_fields = ("account__name", "account__slug", "embedding_model")
    list_select_related = ("account", "created_by")
    readonly_fields = (
        "account",
        "status",
        "embedding_model",
        "total",
        "done",
        "heartbeat_at",
        "created_by",
        "created_at",
        "finished_at",
    )
    fields = readonly_fields
    actions = ["cancel"]

    def has_cancel_permission(self, request):
        return request.user.has_perm("documents.change_reindexrun")

    @admin.action(description="Cancel selected reindex runs", permissions=["cancel"])
    def cancel(self, request, queryset):
        running = queryset.filter(status=ReindexRun.RunStatus.RUNNING).select_related("account")
        _each_in_its_account(
            self, request, running, lambda r, account: account_reindex_cancel(account=account, run=r), "Cancelled"
        )


# --- on the account admin (accounts/ stands below documents and must not import it) -------


@admin.action(description="Reindex all documents of selected accounts", permissions=["reindex_account"])
def reindex_accounts(modeladmin, request, queryset):
    _each_in_its_account(
        modeladmin,
        request,
        queryset,
        lambda _, account: account_reindex_start(account=account, actor=request.user),
        "Reindex started for",
        account_of=lambda account: account,
    )


def documents_panel(account) -> str:
    """How many documents in each status, and the latest ones with their failure reasons."""
    counts = dict(
        Document.all_accounts.filter(account=account).values_list("status").annotate(n=Count("pk")).order_by()
    )
    summary = ", ".join(f"{counts[s]:,} {label.lower()}" for s, label in Status.choices if counts.get(s))
    documents = Document.all_accounts.filter(account=account).order_by("-created_at")[:RECENT_DOCUMENTS]
    rows = [
        (
            format_html('<a href="{}">{}</a>', reverse("admin:documents_document_change", args=[d.pk]), d.name),
            d.get_status_display(),
            f"[{d.error_code}] {d.error}" if d.error_code else d.error,
            f"{d.chunk_count:,}",
            f"{d.created_at:%Y-%m-%d %H:%M}",
        )
        for d in documents
    ]
    url = account_filter_url(Document, account.pk)
    return format_html(
        '<p>{}</p>{}<p><a href="{}">All documents of this account →</a> · '
        '<a href="{}&amp;status__exact=failed">failed ones →</a></p>',
        summary or "No documents.",
        html_table(("name", "status", "failure reason", "chunks", "uploaded"), rows),
        url,
        url,
    )


AccountAdmin.add_panel(
    Panel("documents_panel", f"Documents (latest {RECENT_DOCUMENTS})", "documents.view_document", documents_panel)
)
AccountAdmin.add_action(reindex_accounts, permission="documents.add_reindexrun")
