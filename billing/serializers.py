from rest_framework import serializers

from billing.models import CreditLedgerEntry


class LedgerEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = CreditLedgerEntry
        fields = ["delta", "kind", "tokens", "created_at", "reference", "model", "shortfall", "balance_after"]


class CreditsSerializer(serializers.Serializer):
    balance = serializers.IntegerField()
    entries = LedgerEntrySerializer(many=True)
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
