from rest_framework import serializers

from chat.models import Conversation, Message


class ChatRequestSerializer(serializers.Serializer):
    message = serializers.CharField(max_length=4000, trim_whitespace=True)
    conversation_id = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    collection = serializers.JSONField(
        required=False, allow_null=True, help_text="A collection id, or a list of them: answer from those only"
    )
    tags = serializers.JSONField(
        required=False, allow_null=True, help_text="Answer only from documents carrying any of these tags"
    )
    exclude_tags = serializers.JSONField(
        required=False, allow_null=True, help_text="From no document carrying any of these tags"
    )


class RegenerateRequestSerializer(serializers.Serializer):
    """`POST conversations/{id}/regenerate/`: no question (the last one is asked again); the
    same optional narrowing as `POST chat/`."""

    collection = serializers.JSONField(required=False, allow_null=True)
    tags = serializers.JSONField(required=False, allow_null=True)
    exclude_tags = serializers.JSONField(required=False, allow_null=True)


class ConversationRenameSerializer(serializers.Serializer):
    """The schema of `PATCH conversations/{id}/`; chat.services.conversation_rename checks it."""

    title = serializers.CharField(max_length=200, help_text="1-200 characters on one line")


class CitationSerializer(serializers.Serializer):
    n = serializers.IntegerField()
    document_id = serializers.IntegerField()
    document_name = serializers.CharField()
    chunk_index = serializers.IntegerField()
    pages = serializers.ListField(child=serializers.IntegerField(), allow_null=True)
    ocr = serializers.BooleanField(required=False, help_text="Present (true) when the cited text was read by OCR")


class UsageSerializer(serializers.Serializer):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()


class ChatResponseSerializer(serializers.Serializer):
    conversation_id = serializers.IntegerField()
    message_id = serializers.IntegerField()
    answer = serializers.CharField()
    citations = CitationSerializer(many=True)
    usage = UsageSerializer()
    credits_remaining = serializers.IntegerField()


class MessageSerializer(serializers.ModelSerializer):
    usage = serializers.SerializerMethodField()

    class Meta:
        model = Message
        fields = [
            "id",
            "role",
            "content",
            "status",
            "citations",
            "sources",
            "usage",
            "model",
            "latency_ms",
            "replaced_by",
            "created_at",
        ]

    def get_usage(self, message) -> dict:
        return {
            "prompt_tokens": message.prompt_tokens,
            "completion_tokens": message.completion_tokens,
            "total_tokens": message.total_tokens,
        }


class ConversationSerializer(serializers.ModelSerializer):
    message_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Conversation
        fields = ["id", "title", "created_at", "updated_at", "message_count"]


class ConversationDetailSerializer(ConversationSerializer):
    messages = serializers.SerializerMethodField()

    class Meta(ConversationSerializer.Meta):
        fields = ConversationSerializer.Meta.fields + ["messages"]

    def get_messages(self, conversation) -> list[dict]:
        return MessageSerializer(self.context["messages"], many=True).data


class FeedbackRequestSerializer(serializers.Serializer):
    """The schema of `POST messages/{id}/feedback/`; chat.services.feedback_give checks it."""

    rating = serializers.ChoiceField(choices=["up", "down"])
    comment = serializers.CharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="Optional: what was wrong or right (at most 2,000 characters)",
    )


class FeedbackSerializer(serializers.Serializer):
    """One feedback as owners and admins read it: with the question, the answer and its
    citations (read through messages_sources_readable)."""

    message_id = serializers.IntegerField()
    rating = serializers.CharField()
    comment = serializers.CharField()
    question = serializers.SerializerMethodField()
    answer = serializers.SerializerMethodField()
    citations = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    def get_question(self, feedback) -> str:
        return getattr(feedback, "question", None) or ""

    def get_answer(self, feedback) -> str:
        return feedback.message.content

    def get_citations(self, feedback) -> list[dict]:
        return CitationSerializer(feedback.message.citations or [], many=True).data
