"""Support staff: conversations and their turns, read-only, to see why an answer failed or
what it cost. Nothing here writes: a conversation belongs to its user or key."""

from django.contrib import admin
from django.db.models import Count

from chat.models import Conversation, Message, MessageFeedback
from core.admin_mixins import AccountFilter, AllAccountsMixin, ReadOnlyMixin


class ReadOnlyAdmin(AllAccountsMixin, ReadOnlyMixin, admin.ModelAdmin):
    actions = None


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "account", "user", "api_key", "turns", "created_at", "updated_at")
    list_filter = (AccountFilter,)
    search_fields = ("title", "account__name", "account__slug", "user__email")
    list_select_related = ("account", "user", "api_key")
    ordering = ("-updated_at",)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(message_count=Count("messages"))

    @admin.display(description="messages", ordering="message_count")
    def turns(self, conversation):
        return conversation.message_count


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "account",
        "conversation_id",
        "role",
        "status",
        "route",
        "error_code",
        "credits_charged",
        "model",
        "latency_ms",
    )
    list_filter = ("status", "role", "route", AccountFilter)
    search_fields = ("account__name", "account__slug", "error_code", "model", "conversation__title")
    list_select_related = ("account",)
    ordering = ("-created_at",)
    date_hierarchy = "created_at"


@admin.register(MessageFeedback)
class MessageFeedbackAdmin(ReadOnlyAdmin):
    """What people said about answers: support staff read it to see what went wrong."""

    list_display = ("created_at", "account", "rating", "message_id", "user", "api_key", "short_comment")
    list_filter = ("rating", AccountFilter)
    search_fields = ("account__name", "account__slug", "user__email", "comment")
    list_select_related = ("account", "user", "api_key")
    ordering = ("-created_at",)
    date_hierarchy = "created_at"

    @admin.display(description="comment")
    def short_comment(self, feedback):
        return feedback.comment[:80]
