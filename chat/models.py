"""Conversations and their messages, with citations, usage and the model that answered."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.tenancy import TenantModel


class Conversation(TenantModel):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
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
    query = models.TextField(
        blank=True,
        help_text="What was searched for this question (a follow-up is searched with the question before it)",
    )
    end_user = models.CharField(
        max_length=256, blank=True, help_text="The API caller's end-user id (OpenAI `user`), on questions"
    )
    # A regenerated answer's earlier version: the answer that replaced it (the same question
    # asked again, chat.agent's regenerate). It stays visible as a previous version and is
    # left out of the history the model reads.
    replaced_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["conversation", "created_at"], name="message_conversation_order")]

    def __str__(self):
        return f"{self.role}: {self.content[:40]}"


class Rating(models.TextChoices):
    UP = "up", "Helpful"
    DOWN = "down", "Not helpful"


# A comment says what was wrong with an answer: a few sentences, not a document.
FEEDBACK_COMMENT_MAX_LENGTH = 2000


class MessageFeedback(TenantModel):
    """One person's (or one API key's) thumbs up or down on one answer, with an optional
    comment; giving it again replaces it (chat.services.feedback_give). A key is not the
    person who made it: a key's feedback has `api_key` set and no `user`."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey("accounts.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    rating = models.CharField(max_length=4, choices=Rating.choices)
    comment = models.TextField(blank=True, max_length=FEEDBACK_COMMENT_MAX_LENGTH)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # One per person and message, one per key and message: a second replaces the first.
            models.UniqueConstraint(
                fields=["message", "user"], condition=models.Q(api_key__isnull=True), name="feedback_one_per_person"
            ),
            models.UniqueConstraint(
                fields=["message", "api_key"], condition=models.Q(api_key__isnull=False), name="feedback_one_per_key"
            ),
            models.CheckConstraint(condition=models.Q(rating__in=["up", "down"]), name="feedback_rating_valid"),
        ]
        indexes = [models.Index(fields=["account", "-created_at"], name="feedback_recent")]

    def __str__(self):
        return f"{self.rating} on message {self.message_id}"
