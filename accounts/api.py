"""Account endpoints of the REST API."""

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from accounts import services
from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.permissions import Action, Forbidden, principal_require
from accounts.profile.services import account_rename
from accounts.serializers import CurrentAccountSerializer
from core.error_codes import CoreErrorCode
from core.views import AccountAPIView


class CurrentAccountView(AccountAPIView):
    """The account this request acts for: the API key's, or the session's chosen one."""

    @extend_schema(responses=CurrentAccountSerializer)
    def get(self, request):
        return Response(self._data(request, self.account))

    @extend_schema(
        request=inline_serializer("AccountRename", {"name": serializers.CharField(help_text="The team's new name.")}),
        responses={
            200: CurrentAccountSerializer,
            400: OpenApiResponse(description="`name` missing, empty, too long or with control characters"),
            403: OpenApiResponse(description="not an owner's session (API keys never rename the account)"),
        },
    )
    def patch(self, request):
        """Rename the account (an owner's signed-in session; never an API key). Only `name` is
        read: the account is always the request's own."""
        principal_require(self.principal, Action.ACCOUNT_RENAME)
        name = request.data.get("name") if hasattr(request.data, "get") else None
        if not isinstance(name, str):
            raise AccountError(CoreErrorCode.INVALID_NAME, 'Send {"name": "<the team\'s new name>"}.', field="name")
        account = account_rename(account=self.account, actor=request.user, name=name)
        return Response(self._data(request, account))

    def _data(self, request, account) -> dict:
        membership = self.membership
        data = {
            "id": account.pk,
            "name": account.name,
            "slug": account.slug,
            "created_at": account.created_at,
            "auth": "api_key" if request.auth is not None else "session",
            "role": membership.role if membership is not None else None,
            "scope": request.auth.scope if request.auth is not None else None,
        }
        return CurrentAccountSerializer(data).data

    @extend_schema(
        request=inline_serializer(
            "AccountDelete",
            {"confirm": serializers.CharField(help_text="The account's name, exactly, to confirm the deletion.")},
        ),
        responses={
            202: inline_serializer(
                "AccountDeleted",
                {
                    "id": serializers.IntegerField(),
                    "name": serializers.CharField(),
                    "deleted_at": serializers.DateTimeField(),
                    "status": serializers.CharField(),
                },
            ),
            400: OpenApiResponse(description="`confirm` missing or not the account's name"),
            403: OpenApiResponse(description="not an owner's session (API keys never delete an account)"),
        },
    )
    def delete(self, request):
        """Delete the account (an owner's signed-in session only; never an API key). Its keys,
        members and invitations go at once; documents and conversations are purged by a job;
        the credit ledger and audit log are kept."""
        if request.auth is not None:
            raise Forbidden(
                "An API key cannot delete its account: an owner deletes it on the Team page, or "
                "with DELETE /api/v1/account/ from their signed-in session."
            )
        account = self.account
        principal_require(self.principal, Action.ACCOUNT_DELETE)
        confirm = request.data.get("confirm") if hasattr(request.data, "get") else None
        if confirm is None:
            confirm = request.query_params.get("confirm")
        try:
            services.account_delete_confirmation_check(account=account, confirm=confirm)
        except AccountError as exc:
            if exc.code == AccountErrorCode.CONFIRMATION_REQUIRED:
                raise AccountError(
                    exc.code,
                    '`confirm` is missing: send {"confirm": "<the account\'s name>"} to delete the account.',
                    field="confirm",
                ) from exc
            raise
        account = services.account_delete(account=account, actor=request.user)
        return Response(
            {"id": account.pk, "name": account.name, "deleted_at": account.deleted_at, "status": "deleted"}, status=202
        )
