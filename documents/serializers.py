from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from documents import progress
from documents.models import Chunk, Collection, Document, ReindexRun
from documents.source_links import sources_of


class CollectionRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()


class SourceRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()


class ProgressSerializer(serializers.Serializer):
    chunks_embedded = serializers.IntegerField()
    chunks_total = serializers.IntegerField(help_text="0 until the document is read")
    eta_seconds = serializers.IntegerField(allow_null=True, help_text="null until the time left is known")
    chunks_per_second = serializers.FloatField(allow_null=True, help_text="this server's measured embedding rate")
    queue_position = serializers.IntegerField(allow_null=True, help_text="1: next in its account's queue (pending)")


class DocumentListSerializer(serializers.ListSerializer):
    """A page of documents: their sources (documents.source_links) looked up once for the page."""

    def to_representation(self, data):
        documents = list(data.all() if hasattr(data, "all") else data)
        self.child.context["sources"] = sources_of([d.pk for d in documents])
        self.child.context["progress"] = progress.page_context(documents)
        return super().to_representation(documents)


class DocumentSerializer(serializers.ModelSerializer):
    progress = serializers.SerializerMethodField()
    # While it waits (pending) for a model server that was busy or unreachable: what it waits
    # for ("model_server", else null), said in words (`message`, "" otherwise), and when the
    # queue takes it again (`retry_at`, else null). `error` stays for failed documents only.
    message = serializers.CharField(source="wait_message", read_only=True)
    waiting_for = serializers.SerializerMethodField()
    collection = serializers.SerializerMethodField()
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    source = serializers.SerializerMethodField()

    class Meta:
        model = Document
        list_serializer_class = DocumentListSerializer
        fields = [
            "id",
            "name",
            "content_type",
            "size",
            "status",
            "error",
            "chunk_count",
            "token_count",
            "embedding_tokens",
            "created_at",
            "updated_at",
            "error_code",
            "page_count",
            "credits_estimate",
            "credits_charged",
            "revision",
            "progress",
            "collection",
            "language",
            "tags",
            "source",
            "message",
            "retry_at",
            "waiting_for",
        ]

    @extend_schema_field(SourceRefSerializer(allow_null=True))
    def get_source(self, document) -> dict | None:
        """Where the document came from (a source's id and the page's URL), null for an upload."""
        sources = self.context.get("sources")
        if sources is None:  # one document on its own (detail, upload): its own lookup
            sources = sources_of([document.pk])
        return sources.get(document.pk)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_waiting_for(self, document) -> str | None:
        return "model_server" if document.retry_at is not None and document.status == "pending" else None

    @extend_schema_field(ProgressSerializer(allow_null=True))
    def get_progress(self, document) -> dict | None:
        """While pending or processing: chunks embedded of the total, the time left at this
        server's measured rate, and a waiting document's place in its account's queue; null
        once ready or failed (documents/progress.py)."""
        known = self.context.get("progress")
        if known is None:  # one document on its own (detail, upload): its own lookup
            known = progress.page_context([document])
        return known.progress(document)

    @extend_schema_field(CollectionRefSerializer)
    def get_collection(self, document) -> dict:
        return {"id": document.collection_id, "name": document.collection.name}


class ChunkSummarySerializer(serializers.ModelSerializer):
    index = serializers.IntegerField(source="chunk_index")
    preview = serializers.SerializerMethodField()
    pages = serializers.SerializerMethodField()

    class Meta:
        model = Chunk
        fields = ["index", "token_count", "preview", "pages", "heading_path"]

    def get_preview(self, chunk) -> str:
        text = " ".join(chunk.content.split())
        return text if len(text) <= 200 else text[:199].rsplit(" ", 1)[0] + "…"

    def get_pages(self, chunk) -> list[int] | None:
        return [chunk.page_start, chunk.page_end] if chunk.page_start else None


class DocumentDetailSerializer(DocumentSerializer):
    chunks = serializers.SerializerMethodField()

    class Meta(DocumentSerializer.Meta):
        fields = DocumentSerializer.Meta.fields + ["chunks"]

    def get_chunks(self, document) -> list[dict]:
        return ChunkSummarySerializer(self.context["chunks"], many=True).data


class UploadSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="PDF, DOCX, TXT, Markdown, CSV or HTML")
    collection = serializers.IntegerField(required=False, help_text="A collection id (default: General)")
    tags = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Tags, comma-separated or the field repeated (1-40 characters, at most 20)",
    )


class DocumentUpdateSerializer(serializers.Serializer):
    tags = serializers.JSONField(
        help_text="The document's tags, replacing the ones it has "
        "(1-40 characters each, at most 20, unique case-insensitively)"
    )


class ReindexRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = ReindexRun
        fields = ["id", "status", "embedding_model", "total", "done", "created_at", "finished_at"]


class CollectionSerializer(serializers.ModelSerializer):
    document_count = serializers.IntegerField(read_only=True)
    access = serializers.SerializerMethodField()

    class Meta:
        model = Collection
        fields = ["id", "name", "restricted", "is_default", "document_count", "created_at", "access"]

    def get_access(self, collection) -> dict:
        """Who was given access (meaningful for a restricted collection): member user ids and
        API key ids."""
        rows = self.context.get("access", {}).get(collection.pk, [])
        return {
            "users": sorted(r.user_id for r in rows if r.user_id),
            "api_keys": sorted(r.api_key_id for r in rows if r.api_key_id),
        }


class CollectionWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False)
    restricted = serializers.BooleanField(required=False)
    users = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        required=False,
        max_length=1000,
        help_text="Member user ids given access",
    )
    api_keys = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        required=False,
        max_length=1000,
        help_text="API key ids given access",
    )
