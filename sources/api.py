"""REST endpoints for sources (docs/guide/sources.md): list, add, detail, sync, delete."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from accounts.permissions import Action, allows, principal_require
from core.api import CursorPagination
from core.error_codes import CoreErrorCode
from core.views import AccountAPIView
from sources import selectors, services
from sources.errors import SourceError
from sources.serializers import (
    SourceCreateSerializer,
    SourceDetailSerializer,
    SourceSerializer,
)

# Adding, syncing and deleting a source need what uploading a document needs (a source uploads).
PERMISSIONS = allows(GET=Action.DOCUMENT_READ, POST=Action.DOCUMENT_UPLOAD, DELETE=Action.DOCUMENT_DELETE)


class SourcePagination(CursorPagination):
    ordering = ("-created_at", "-pk")


def _body(request) -> dict:
    if not isinstance(request.data, dict):
        raise SourceError(CoreErrorCode.BAD_REQUEST, "Send a JSON object.")
    return request.data


def _detail(account, source) -> dict:
    source = selectors.source_access_by_id(account=account, source_id=source.pk)
    history = list(selectors.sync_list(account=account, source=source))
    syncs = selectors.syncs_by_id(account=account, ids=[source.last_sync_id])
    return SourceDetailSerializer(source, context={"syncs": syncs, "history": history}).data


class SourceListView(AccountAPIView):
    permission_classes = [PERMISSIONS]

    @extend_schema(responses=SourceSerializer(many=True))
    def get(self, request):
        paginator = SourcePagination()
        page = paginator.paginate_queryset(selectors.source_list(account=self.account), request, view=self)
        syncs = selectors.syncs_by_id(account=self.account, ids=[s.last_sync_id for s in page])
        return paginator.get_paginated_response(SourceSerializer(page, many=True, context={"syncs": syncs}).data)

    @extend_schema(request=SourceCreateSerializer, responses={201: SourceDetailSerializer})
    def post(self, request):
        body = _body(request)
        source = services.source_create(
            account=self.account,
            actor=self.user,
            api_key=self.api_key,
            kind=body.get("kind"),
            url=body.get("url"),
            max_pages=body.get("max_pages"),
            schedule=body.get("schedule"),
            options=body.get("options"),
            tags=body.get("tags"),
        )
        return Response(_detail(self.account, source), status=status.HTTP_201_CREATED)


class SourceDetailView(AccountAPIView):
    permission_classes = [PERMISSIONS]

    @extend_schema(responses=SourceDetailSerializer)
    def get(self, request, source_id: int):
        source = selectors.source_access_by_id(account=self.account, source_id=source_id)
        return Response(_detail(self.account, source))

    @extend_schema(request=None, responses={202: None})
    def delete(self, request, source_id: int):
        source = selectors.source_access_by_id(account=self.account, source_id=source_id)
        principal_require(self.principal, Action.DOCUMENT_DELETE, source)  # a member: only their own
        services.source_delete(account=self.account, source=source, actor=self.api_key or self.user)
        return Response({"id": source.pk, "status": "deleting"}, status=status.HTTP_202_ACCEPTED)


class SourceSyncView(AccountAPIView):
    permission_classes = [allows(Action.DOCUMENT_UPLOAD)]

    @extend_schema(request=None, responses={202: SourceDetailSerializer})
    def post(self, request, source_id: int):
        source = selectors.source_access_by_id(account=self.account, source_id=source_id)
        services.source_sync_request(account=self.account, source=source, actor=self.api_key or self.user)
        return Response(_detail(self.account, source), status=status.HTTP_202_ACCEPTED)
