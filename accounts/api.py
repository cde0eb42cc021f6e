"""Account endpoints of the REST API."""
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.serializers import CurrentAccountSerializer


class CurrentAccountView(APIView):
    """The account this request acts for: the API key's, or the session's chosen one."""

    @extend_schema(responses=CurrentAccountSerializer)
    def get(self, request):
        account = request._request.account
        membership = request._request.membership
        data = {
            "id": account.pk, "name": account.name, "slug": account.slug, "created_at": account.created_at,
            "auth": "api_key" if request.auth is not None else "session",
            "role": membership.role if membership is not None and request.auth is None else None,
            "scope": request.auth.scope if request.auth is not None else None,
        }
        return Response(CurrentAccountSerializer(data).data)
