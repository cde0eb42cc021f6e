from rest_framework import serializers


class CurrentAccountSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    slug = serializers.CharField()
    created_at = serializers.DateTimeField()
    auth = serializers.ChoiceField(choices=["api_key", "session"])
    role = serializers.CharField(
        allow_null=True, help_text="The signed-in member's role (owner, admin, member or viewer); null for API keys."
    )
    scope = serializers.CharField(allow_null=True, help_text="The API key's scope (read or write); null for a session.")
