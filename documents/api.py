"""REST endpoints for documents (docs/api/rest.md): list, upload, detail, delete, reindex."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from accounts.permissions import Action, allows, principal_require
from core.api import CursorPagination
from core.views import AccountAPIView
from documents import selectors, services
from documents.error_codes import DocumentErrorCode
from documents.errors import TagsInvalid
from documents.models import Status
from documents.serializers import (
    DocumentDetailSerializer,
    DocumentSerializer,
    DocumentUpdateSerializer,
    ReindexRunSerializer,
    UploadSerializer,
)
from documents.tags import document_tags_set, tags_from_form


class DocumentPagination(CursorPagination):
    ordering = ("-created_at", "-pk")


class DocumentListView(AccountAPIView):
    permission_classes = [allows(GET=Action.DOCUMENT_READ, POST=Action.DOCUMENT_UPLOAD)]
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=Status.values, required=False),
            OpenApiParameter("q", str, required=False, description="Name contains"),
            OpenApiParameter("collection", int, required=False, description="Only this collection's documents"),
            OpenApiParameter("tag", str, required=False, description="Only documents carrying this tag"),
            OpenApiParameter("cursor", str, required=False),
            OpenApiParameter("page_size", int, required=False),
        ],
        responses=DocumentSerializer(many=True),
    )
    def get(self, request):
        account = self.account
        documents = selectors.document_list(
            account=account,
            status=request.query_params.get("status") or None,
            query=request.query_params.get("q") or None,
            collection_ids=selectors.collection_ids_requested(
                account=account, requested=request.query_params.get("collection")
            ),
            tag=request.query_params.get("tag") or None,
        )
        paginator = DocumentPagination()
        page = paginator.paginate_queryset(documents, request, view=self)
        return paginator.get_paginated_response(DocumentSerializer(page, many=True).data)

    @extend_schema(
        request={"multipart/form-data": UploadSerializer}, responses={202: DocumentSerializer, 200: DocumentSerializer}
    )
    def post(self, request):
        services.upload_request_check(content_length=request.META.get("CONTENT_LENGTH"))
        account = self.account
        # The collection to upload into (optional, a visible one's id; else the default).
        collection = request.data.get("collection")
        collection = (
            selectors.collection_access_by_id(account=account, collection_id=collection) if collection else None
        )
        tags = tags_from_form(request.data.getlist("tags") if hasattr(request.data, "getlist") else [])
        document, created = services.document_upload(
            account=account, actor=request.user, upload=request.FILES.get("file"), collection=collection, tags=tags
        )
        return Response(
            DocumentSerializer(document).data, status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK
        )


class DocumentDetailView(AccountAPIView):
    permission_classes = [allows(GET=Action.DOCUMENT_READ, DELETE=Action.DOCUMENT_DELETE, PATCH=Action.DOCUMENT_TAG)]

    @extend_schema(responses=DocumentDetailSerializer)
    def get(self, request, document_id: int):
        account = self.account
        document = selectors.document_access_by_id(account=account, document_id=document_id)
        chunks = selectors.chunk_list(account=account, document=document)
        return Response(DocumentDetailSerializer(document, context={"chunks": chunks}).data)

    @extend_schema(
        request=DocumentUpdateSerializer, responses=DocumentSerializer, description="Replace the document's tags."
    )
    def patch(self, request, document_id: int):
        account = self.account
        document = selectors.document_access_by_id(account=account, document_id=document_id)
        principal_require(self.principal, Action.DOCUMENT_TAG, document)  # a member: only their own
        if not isinstance(request.data, dict) or "tags" not in request.data:
            raise TagsInvalid(
                DocumentErrorCode.INVALID_TAGS,
                'Send {"tags": [...]}: the tags that replace the document\'s tags ([] removes them).',
                field="tags",
            )
        document = document_tags_set(account=account, actor=request.user, document=document, tags=request.data["tags"])
        return Response(DocumentSerializer(document).data)

    @extend_schema(request=None, responses={202: DocumentSerializer})
    def delete(self, request, document_id: int):
        account = self.account
        document = selectors.document_access_by_id(account=account, document_id=document_id)
        principal_require(self.principal, Action.DOCUMENT_DELETE, document)  # a member: only their own
        document = services.document_delete(account=account, document=document)
        return Response(DocumentSerializer(document).data, status=status.HTTP_202_ACCEPTED)


class DocumentReindexView(AccountAPIView):
    permission_classes = [allows(Action.DOCUMENT_REINDEX)]

    @extend_schema(request=None, responses={202: DocumentSerializer})
    def post(self, request, document_id: int):
        account = self.account
        document = selectors.document_access_by_id(account=account, document_id=document_id)
        document = services.document_reindex(account=account, document=document)
        return Response(DocumentSerializer(document).data, status=status.HTTP_202_ACCEPTED)


class DocumentReindexCancelView(AccountAPIView):
    """Cancel a document's pending or running reindex: it keeps the chunks it had."""

    permission_classes = [allows(Action.DOCUMENT_REINDEX)]

    @extend_schema(request=None, responses=DocumentSerializer)
    def post(self, request, document_id: int):
        account = self.account
        document = selectors.document_access_by_id(account=account, document_id=document_id)
        document = services.document_reindex_cancel(account=account, document=document)
        return Response(DocumentSerializer(document).data)


class AccountReindexView(AccountAPIView):
    """Re-embed every document of the account; GET shows the latest run's progress."""

    permission_classes = [allows(GET=Action.DOCUMENT_READ, POST=Action.ACCOUNT_REINDEX)]

    @extend_schema(request=None, responses={202: ReindexRunSerializer})
    def post(self, request):
        run = services.account_reindex_start(account=self.account, actor=request.user)
        return Response(ReindexRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=inline_serializer("CurrentReindex", {"run": ReindexRunSerializer(allow_null=True)}))
    def get(self, request):
        run = selectors.reindex_run_current(account=self.account)
        return Response({"run": ReindexRunSerializer(run).data if run else None})


class AccountReindexCancelView(AccountAPIView):
    permission_classes = [allows(Action.ACCOUNT_REINDEX)]

    @extend_schema(request=None, responses=ReindexRunSerializer)
    def post(self, request, run_id: int):
        run = selectors.reindex_run_access_by_id(account=self.account, run_id=run_id)
        return Response(ReindexRunSerializer(services.account_reindex_cancel(account=self.account, run=run)).data)
