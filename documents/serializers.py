from rest_framework import serializers

from documents.models import Chunk, Document, ReindexRun


class DocumentSerializer(serializers.ModelSerializer):
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Document
        fields = ["id", "name", "content_type", "size", "status", "error", "chunk_count", "token_count",
                  "created_at", "updated_at", "error_code", "page_count", "credits_estimate", "credits_charged", "revision", "progress"]

    def get_progress(self, document) -> dict:
        return {"done": document.progress_done, "total": document.progress_total}


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


class ReindexRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = ReindexRun
        fields = ["id", "status", "embedding_model", "total", "done", "created_at", "finished_at"]
