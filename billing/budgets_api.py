"""Budgets over REST: `GET /api/v1/budgets/` (owners and admins: every budget of the account;
anyone else: their own, or the calling key's own), `PUT /api/v1/budgets/` (set or change one
cap; owners and admins) and `DELETE /api/v1/budgets/{id}/` (owners and admins)."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from accounts.permissions import Action, allows, principal_may
from billing.budgets import budget_list, budget_remove, budget_set, budget_status_for, budget_statuses
from core.views import AccountAPIView


def budget_json(status) -> dict:
    b = status.budget
    target = (
        {"type": "member", "id": b.user_id, "name": b.user.email}
        if b.user_id
        else {"type": "api_key", "id": b.api_key_id, "name": str(b.api_key)}
    )
    return {
        "id": b.pk,
        "target": target,
        "period": status.period,
        "limit": status.limit,
        "spent": status.spent,
        "remaining": status.remaining,
        "resets_at": status.resets_at,
    }


class BudgetSetSerializer(serializers.Serializer):
    user_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1)
    api_key_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1)
    period = serializers.ChoiceField(choices=["day", "month"])
    limit = serializers.IntegerField(min_value=1, max_value=10**12)


_BUDGET = inline_serializer(
    "Budget",
    {
        "id": serializers.IntegerField(),
        "target": serializers.DictField(),
        "period": serializers.CharField(),
        "limit": serializers.IntegerField(),
        "spent": serializers.IntegerField(),
        "remaining": serializers.IntegerField(),
        "resets_at": serializers.DateTimeField(),
    },
)


class BudgetsView(AccountAPIView):
    permission_classes = [allows(GET=Action.CREDITS_VIEW, PUT=Action.BUDGETS_MANAGE)]

    @extend_schema(responses=inline_serializer("Budgets", {"results": serializers.ListField(child=_BUDGET)}))
    def get(self, request):
        account, api_key = self.account, self.api_key
        if api_key is None and principal_may(self.principal, Action.BUDGETS_MANAGE):
            statuses = budget_statuses(account=account, budgets=budget_list(account=account))
        else:
            statuses = budget_status_for(account=account, user=request.user, api_key=api_key)
        return Response({"results": [budget_json(s) for s in statuses]})

    @extend_schema(request=BudgetSetSerializer, responses=_BUDGET)
    def put(self, request):
        body = BudgetSetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        account = self.account
        data = body.validated_data
        budget = budget_set(
            account=account,
            actor=self.api_key or request.user,
            period=data["period"],
            limit=data["limit"],
            user_id=data.get("user_id"),
            api_key_id=data.get("api_key_id"),
        )
        status = next(s for s in budget_statuses(account=account, budgets=[budget]))
        return Response(budget_json(status))


class BudgetDetailView(AccountAPIView):
    permission_classes = [allows(DELETE=Action.BUDGETS_MANAGE)]

    @extend_schema(responses={204: None})
    def delete(self, request, budget_id: int):
        budget_remove(account=self.account, actor=self.api_key or request.user, budget_id=budget_id)
        return Response(status=204)
