from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from sources.kinds import kind_choices, registry
from sources.models import Source, SourceSync


class SyncCountsSerializer(serializers.Serializer):
    added = serializers.IntegerField()
    updated = serializers.IntegerField()
    removed = serializers.IntegerField()
    unchanged = serializers.IntegerField()


class SourceSyncSerializer(serializers.ModelSerializer):
    class Meta:
        model = SourceSync
        fields = [
            "id",
            "trigger",
            "status",
            "started_at",
            "finished_at",
            "added",
            "updated",
            "removed",
            "unchanged",
            "error",
            "problems",
        ]


class SourceSerializer(serializers.ModelSerializer):
    """The contract's `source`, plus what a kind and a schedule add. `context["syncs"]`:
    {sync id: SourceSync} for the sources' last syncs (one query for a list)."""

    document_count = serializers.IntegerField(read_only=True)
    last_sync = serializers.SerializerMethodField()
    schedule = serializers.SerializerMethodField()

    class Meta:
        model = Source
        fields = [
            "id",
            "kind",
            "url",
            "status",
            "error",
            "last_synced_at",
            "document_count",
            "last_sync",
            "max_pages",
            "schedule",
            "next_sync_at",
            "options",
            "tags",
            "created_at",
        ]

    @extend_schema_field(SyncCountsSerializer(allow_null=True))
    def get_last_sync(self, source) -> dict | None:
        sync = self.context.get("syncs", {}).get(getattr(source, "last_sync_id", None))
        if sync is None:
            return None
        return {"added": sync.added, "updated": sync.updated, "removed": sync.removed, "unchanged": sync.unchanged}

    def get_schedule(self, source) -> str | None:
        return source.schedule or None


class SourceDetailSerializer(SourceSerializer):
    syncs = serializers.SerializerMethodField()

    class Meta(SourceSerializer.Meta):
        fields = SourceSerializer.Meta.fields + ["syncs"]

    @extend_schema_field(SourceSyncSerializer(many=True))
    def get_syncs(self, source) -> list[dict]:
        return SourceSyncSerializer(self.context.get("history", []), many=True).data


def _options_help() -> str:
    """What each kind's `options` may hold, from the kinds themselves: 'git: {"branch"?, "path"?}'."""

    def shape(kind) -> str:
        return "{" + ", ".join(f'"{option.name}"?' for option in kind.options) + "}"

    return "; ".join(f"{kind.name}: {shape(kind)}" for kind in registry().values() if kind.options)


class SourceCreateSerializer(serializers.Serializer):
    """For the schema; the service checks every field (a 400 naming it), each kind its
    `url` and `options` (sources/kinds/)."""

    kind = serializers.ChoiceField(choices=kind_choices())
    url = serializers.CharField()
    max_pages = serializers.IntegerField(required=False, help_text="At most this many pages or files (default 50)")
    schedule = serializers.ChoiceField(choices=["hourly", "daily"], allow_null=True, required=False)
    options = serializers.DictField(required=False, help_text=_options_help())
    tags = serializers.ListField(child=serializers.CharField(), required=False)
