"""GET /api/v1/credits/: the balance and the ledger, newest first."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from accounts.permissions import Action, allows
from billing import references
from billing.models import Kind
from billing.selectors import balance_get, ledger_list
from billing.serializers import CreditsSerializer, LedgerEntrySerializer
from core.api import CursorPagination
from core.views import AccountAPIView


class LedgerPagination(CursorPagination):
    ordering = ("-created_at", "-pk")


class CreditsView(AccountAPIView):
    permission_classes = [allows(Action.CREDITS_VIEW)]

    @extend_schema(
        responses=CreditsSerializer,
        parameters=[
            OpenApiParameter("kind", str, enum=Kind.values, required=False),
            OpenApiParameter("cursor", str, required=False),
            OpenApiParameter("page_size", int, required=False),
        ],
    )
    def get(self, request):
        account = self.account
        kind = request.query_params.get("kind")
        if kind is not None and kind not in Kind.values:
            kind = "__none__"  # an unknown kind matches nothing, like any other filter
        paginator = LedgerPagination()
        page = paginator.paginate_queryset(ledger_list(account=account, kind=kind), request, view=self)
        entries = LedgerEntrySerializer(page, many=True).data
        seen = references.as_seen(account=account, references=[entry["reference"] for entry in entries])
        for entry in entries:  # a restricted document's charges name no document
            entry["reference"] = seen[entry["reference"]]
        return Response(
            {
                "balance": balance_get(account=account),
                "entries": entries,
                "next": paginator.get_next_link(),
                "previous": paginator.get_previous_link(),
            }
        )
