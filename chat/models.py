"""Conversations and their messages, with citations, usage and the model that answered."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from core.tenancy import TenantModel


class Conversation(TenantModel):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    api_key = models.ForeignKey("accounts.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        indexes = [models.Index(fields=["account", "-updated_at"], name="conversation_recent")]

    def __str__(self):
        return self.title or f"Conversation {self.pk}"


class Role(models.TextChoices):
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"


class MessageStatus(models.TextChoices):
    COMPLETE = "complete", "Complete"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


class Message(TenantModel):
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=10, choices=Role.choices)
    content = models.TextField()
    status = models.CharField(max_length=10, choices=MessageStatus.choices, default=MessageStatus.COMPLETE)
    route = models.CharField(max_length=10, blank=True, help_text="general, lookup or summary")
    sources = models.JSONField(default=list, blank=True, help_text="What was retrieved: n → document, chunks, pages")
    citations = models.JSONField(default=list, blank=True, help_text="The sources the answer cites")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    credits_charged = models.PositiveIntegerField(default=0)
    model = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=200, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    first_token_ms = models.PositiveIntegerField(null=True, blank=True)
    error_code = models.CharField(max_length=40, blank=True)
    query = models.TextField(blank=True, help_text="What was searched for this question (a follow-up is "
                                                    "searched with the question before it)")
    end_user = models.CharField(max_length=256, blank=True,
                                help_text="The API caller's end-user id (OpenAI `user`), on questions")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["conversation", "created_at"], name="message_conversation_order")]

    def __str__(self):
        return f"{self.role}: {self.content[:40]}"
