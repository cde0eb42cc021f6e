"""GET /api/v1/audit/: the account's audit log, for its owners and admins."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers

from audit.selectors import audit_entry_list
from core.api import CursorPagination
from core.error_codes import CoreErrorCode
from core.errors import GroundworkError
from core.views import AccountAPIView


class AuditEntrySerializer(serializers.Serializer):
    at = serializers.DateTimeField(source="created_at")
    actor = serializers.SerializerMethodField()
    action = serializers.CharField()
    target = serializers.CharField()
    detail = serializers.JSONField()

    def get_actor(self, entry) -> dict:
        return {"kind": entry.actor_kind, "id": entry.actor_id, "name": entry.actor_display}


class AuditPagination(CursorPagination):
    ordering = ("-created_at", "-id")


def require_manager(view: AccountAPIView) -> None:
    """Owners and admins signed in to the account. An API key has no role, so it is refused."""
    if view.api_key is not None or not getattr(view.membership, "can_manage_team", False):
        raise GroundworkError(
            CoreErrorCode.FORBIDDEN, "Only the account's owners and admins can read the audit log.", status=403
        )


class AuditListView(AccountAPIView):
    @extend_schema(
        responses=AuditEntrySerializer(many=True),
        parameters=[
            OpenApiParameter("action", str, description="an action (document.upload) or its prefix (document)"),
            OpenApiParameter("actor", str, description="user, key, staff or system; or an email or key name"),
        ],
    )
    def get(self, request):
        require_manager(self)
        entries = audit_entry_list(
            account=self.account, action=request.query_params.get("action"), actor=request.query_params.get("actor")
        )
        paginator = AuditPagination()
        page = paginator.paginate_queryset(entries, request, view=self)
        return paginator.get_paginated_response(AuditEntrySerializer(page, many=True).data)
