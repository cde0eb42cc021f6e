"""`POST /api/v1/search/` (docs/api/rest.md): hybrid search in the caller's account; and
`GET/PUT /api/v1/settings/retrieval/`, the account's excluded tags.

Errors are domain errors mapped by core.api's handler: 400 invalid body, 401 without a
key, 402 insufficient credits (nothing retrieved), 502 provider unavailable.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from accounts.permissions import Action, allows
from core.views import AccountAPIView
from documents.error_codes import DocumentErrorCode
from documents.errors import TagsInvalid
from documents.selectors import collection_ids_requested
from documents.tags import retrieval_exclude_tags, retrieval_exclude_tags_set
from retrieval.explain import explained_search, search_result
from retrieval.search.query import query_search


class JSONBooleanField(serializers.BooleanField):
    """true or false as JSON booleans only: DRF's BooleanField also takes "yes", 1 or "false",
    and a flag that changes the answer's shape should not guess."""

    default_error_messages = {
        "invalid": "Must be a JSON boolean, true or false.",
        "null": "Must be a JSON boolean, true or false, not null.",
    }

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class SearchRequestSerializer(serializers.Serializer):
    query = serializers.CharField(min_length=1, max_length=2000)
    top_k = serializers.IntegerField(min_value=1, max_value=50, required=False)
    collection = serializers.JSONField(
        required=False, allow_null=True, help_text="A collection id, or a list of them: search those only"
    )
    tags = serializers.JSONField(required=False, allow_null=True, help_text="Only documents carrying any of these tags")
    exclude_tags = serializers.JSONField(
        required=False, allow_null=True, help_text="No document carrying any of these tags"
    )
    explain = JSONBooleanField(
        required=False,
        default=False,
        help_text="true: each result also has each path's rank and the vector score, "
        "and the answer the threshold and the candidates that did not pass",
    )


class SearchResultSerializer(serializers.Serializer):
    document_id = serializers.IntegerField()
    document_name = serializers.CharField()
    chunk_index = serializers.IntegerField()
    pages = serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2, allow_null=True)
    score = serializers.FloatField()
    text = serializers.CharField()


class ExplainedResultSerializer(SearchResultSerializer):
    rank = serializers.IntegerField(allow_null=True, help_text="1-based place in the fused list; null below it")
    vector_rank = serializers.IntegerField(allow_null=True, help_text="1-based; null: the vector path missed it")
    fulltext_rank = serializers.IntegerField(allow_null=True, help_text="1-based; null: full text missed it")
    vector_score = serializers.FloatField(allow_null=True, help_text="cosine similarity; null: vector path missed it")
    passed_threshold = serializers.BooleanField(help_text="the vector score is at or above the threshold")


class SearchChargeSerializer(serializers.Serializer):
    tokens = serializers.IntegerField()
    credits = serializers.IntegerField()
    model = serializers.CharField()


class SearchResponseSerializer(serializers.Serializer):
    results = SearchResultSerializer(many=True)
    threshold = serializers.FloatField(required=False, help_text="with explain")
    below_threshold = ExplainedResultSerializer(many=True, required=False, help_text="with explain")
    charged = SearchChargeSerializer(required=False, help_text="with explain")


class SearchView(AccountAPIView):
    """Each call embeds the query and is charged as a new operation (its own key)."""

    permission_classes = [allows(Action.SEARCH)]

    @extend_schema(
        request=SearchRequestSerializer,
        responses=SearchResponseSerializer,
        description="Hybrid (vector + full text) search over the account's documents. "
        "Charges the query's embedding tokens.",
    )
    def post(self, request):
        body = SearchRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # An id the caller may not see is a 404, before anything is charged.
        collection_ids = collection_ids_requested(account=self.account, requested=body.validated_data.get("collection"))
        found = query_search(
            account=self.account,
            query=body.validated_data["query"],
            collection_ids=collection_ids,
            top_k=body.validated_data.get("top_k"),
            key=f"search:{uuid.uuid4()}",
            user=request.user,
            api_key=self.api_key,
            explain=body.validated_data["explain"],
            tags=body.validated_data.get("tags"),
            exclude_tags=body.validated_data.get("exclude_tags"),
        )
        if body.validated_data["explain"]:
            return Response(explained_search(found, threshold=settings.RAG_MATCH_THRESHOLD))
        return Response({"results": [search_result(hit) for hit in found.hits]})


class RetrievalSettingsSerializer(serializers.Serializer):
    exclude_tags = serializers.ListField(
        child=serializers.CharField(),
        help_text=(
            "Documents carrying any of these tags are never retrieved, on any surface (1-40 characters each, "
            "at most 20)"
        ),
    )


class RetrievalSettingsView(AccountAPIView):
    """`GET/PUT settings/retrieval/`: the account's excluded tags (owners and admins)."""

    permission_classes = [allows(Action.RETRIEVAL_SETTINGS)]

    @extend_schema(responses=RetrievalSettingsSerializer)
    def get(self, request):
        return Response({"exclude_tags": retrieval_exclude_tags(account=self.account)})

    @extend_schema(request=RetrievalSettingsSerializer, responses=RetrievalSettingsSerializer)
    def put(self, request):
        if not isinstance(request.data, dict) or "exclude_tags" not in request.data:
            raise TagsInvalid(
                DocumentErrorCode.INVALID_TAGS, 'Send {"exclude_tags": [...]} ([] excludes none).', field="exclude_tags"
            )
        tags = retrieval_exclude_tags_set(
            account=self.account, actor=request.user, exclude_tags=request.data["exclude_tags"]
        )
        return Response({"exclude_tags": tags})
