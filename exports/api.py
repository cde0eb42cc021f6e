"""POST /api/v1/exports/, GET /api/v1/exports/{id}/ and the download (docs/guide/data-export.md).

An export is a person's data: only a signed-in member asks for it and downloads it. An API
key is refused (403 `forbidden`) whatever its scope: it is not a person.
"""

from __future__ import annotations

from django.core.files.storage import default_storage
from django.http import FileResponse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.response import Response

from accounts.permissions import Action, Forbidden, allows
from accounts.sso.session import signed_in_with_sso
from core.views import AccountAPIView
from exports.models import ExportStatus
from exports.selectors import export_access_by_id
from exports.services import (
    export_download_url,
    export_expired_message,
    export_for_download,
    export_is_expired,
    export_request,
)


class PeopleOnly(BasePermission):
    """A member's session, never an API key (before the table, so the refusal says why)."""

    def has_permission(self, request, view):
        if request.auth is not None or view.api_key is not None:
            raise Forbidden(
                "A data export is a person's data: sign in to the dashboard to request or download it. API keys cannot."
            )
        return True


ExportSerializer = inline_serializer(
    "DataExport",
    fields={
        "id": serializers.IntegerField(),
        "status": serializers.ChoiceField(choices=ExportStatus.values),
        "error": serializers.CharField(allow_null=True),
        "download_url": serializers.CharField(allow_null=True),
        "left_out": serializers.ListField(
            child=inline_serializer(
                "DataExportLeftOut",
                fields={
                    "id": serializers.IntegerField(),
                    "name": serializers.CharField(),
                    "reason": serializers.ChoiceField(choices=["sso_required"]),
                },
            )
        ),
    },
)


def export_body(export) -> dict:
    error = export.error or None
    if export.status == ExportStatus.READY and export_is_expired(export):
        error = export_expired_message(export)
    return {
        "id": export.pk,
        "status": export.status,
        "error": error,
        "download_url": export_download_url(export),
        "left_out": export.left_out,
    }


class ExportAPIView(AccountAPIView):
    """A person's export: their own session only, with `data.export`."""

    permission_classes = [PeopleOnly, allows(Action.DATA_EXPORT)]


class ExportListView(ExportAPIView):
    @extend_schema(
        request=None,
        responses={
            202: inline_serializer(
                "DataExportCreated", fields={"id": serializers.IntegerField(), "status": serializers.CharField()}
            )
        },
    )
    def post(self, request):
        export = export_request(user=request.user, by_sso=signed_in_with_sso(request.session))
        return Response({"id": export.pk, "status": export.status}, status=status.HTTP_202_ACCEPTED)


class ExportDetailView(ExportAPIView):
    @extend_schema(responses=ExportSerializer)
    def get(self, request, export_id):
        return Response(export_body(export_access_by_id(user=request.user, export_id=export_id)))


class ExportDownloadView(ExportAPIView):
    @extend_schema(responses={(200, "application/zip"): bytes})
    def get(self, request, export_id, token):
        export = export_for_download(
            user=request.user, export_id=export_id, token=token, by_sso=signed_in_with_sso(request.session)
        )
        filename = f"groundwork-export-{export.created_at:%Y-%m-%d}-{export.pk}.zip"
        response = FileResponse(
            default_storage.open(export.file, "rb"),
            as_attachment=True,
            filename=filename,
            content_type="application/zip",
        )
        response["Cache-Control"] = "private, no-store"
        return response
