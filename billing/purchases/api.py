"""`POST /api/v1/billing/checkout/` `{"credits": N}` → `{"url"}` (owners: `billing.manage`;
admins, members, viewers and every API key get 403: a key never spends the team's money)."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from accounts.permissions import Action, allows
from billing.purchases.services import purchase_checkout_start
from billing.purchases.views import checkout_urls
from core.views import AccountAPIView


class CheckoutView(AccountAPIView):
    permission_classes = [allows(Action.BILLING_MANAGE)]

    @extend_schema(
        request=inline_serializer("CheckoutRequest", {"credits": serializers.IntegerField()}),
        responses=inline_serializer(
            "Checkout",
            {
                "url": serializers.URLField(),
                "purchase_id": serializers.UUIDField(),
                "credits": serializers.IntegerField(),
                "amount": serializers.IntegerField(),
                "currency": serializers.CharField(),
            },
        ),
    )
    def post(self, request):
        data = request.data if isinstance(request.data, dict) else {}
        credits = data.get("credits")
        success_url, cancel_url = checkout_urls(request._request)
        # A number, not a string of one: anything else is refused by credits_parse's rule.
        checkout = purchase_checkout_start(
            account=self.account,
            actor=self.user,
            credits=credits if isinstance(credits, int) else None,
            success_url=success_url,
            cancel_url=cancel_url,
        )
        purchase = checkout.purchase
        return Response(
            {
                "url": checkout.url,
                "purchase_id": str(purchase.public_id),
                "credits": purchase.credits,
                "amount": purchase.amount_cents,
                "currency": purchase.currency,
            }
        )
