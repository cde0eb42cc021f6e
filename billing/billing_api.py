"""Owners' billing settings over REST: `GET /api/v1/billing/` and `PUT /api/v1/billing/`
(`billing.manage`: owners only; admins, members, viewers and every API key get 403)."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from accounts.permissions import Action, allows
from billing.alerts import billing_settings_get, billing_settings_update
from billing.selectors import balance_get
from core.views import AccountAPIView


def billing_json(*, account, current) -> dict:
    return {
        "contact_email": current.contact_email if current else "",
        "low_balance_threshold": current.low_balance_threshold if current else None,
        "balance": balance_get(account=account),
        "alert": {
            # "off" (no threshold), "armed" (emails at the next charge below it), "sent" (until
            # credits bring the balance back to the threshold).
            "state": (
                "off"
                if current is None or current.low_balance_threshold is None
                else "armed"
                if current.alert_armed
                else "sent"
            ),
            "last_sent_at": current.last_alert_at if current else None,
            "last_sent_to": (current.last_alert_to or None) if current else None,
            "last_sent_balance": current.last_alert_balance if current else None,
        },
    }


class BillingSettingsSerializer(serializers.Serializer):
    # Strings, checked by billing.alerts (one set of rules and messages for the page and the API).
    contact_email = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, max_length=254, trim_whitespace=True
    )
    low_balance_threshold = serializers.JSONField(
        required=False, allow_null=True, help_text="Credits (0 or more), or null for no alert"
    )


_BILLING = inline_serializer(
    "Billing",
    {
        "contact_email": serializers.CharField(),
        "low_balance_threshold": serializers.IntegerField(allow_null=True),
        "balance": serializers.IntegerField(),
        "alert": serializers.DictField(),
    },
)


class BillingView(AccountAPIView):
    permission_classes = [allows(Action.BILLING_MANAGE)]

    @extend_schema(responses=_BILLING)
    def get(self, request):
        account = self.account
        return Response(billing_json(account=account, current=billing_settings_get(account=account)))

    @extend_schema(request=BillingSettingsSerializer, responses=_BILLING)
    def put(self, request):
        body = BillingSettingsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        account = self.account
        current = billing_settings_update(account=account, actor=request.user, **body.validated_data)
        return Response(billing_json(account=account, current=current))
