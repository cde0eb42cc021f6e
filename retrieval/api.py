"""`POST /api/v1/search/` (README, "API"): hybrid search in the caller's account.

Errors are domain errors mapped by core.api's handler: 400 invalid body, 401 without a
key, 402 insufficient credits (nothing retrieved), 502 provider unavailable.
"""
from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from accounts.permissions import Action, allows
from core.views import AccountAPIView
from retrieval.search.query import search_for_query
from documents.selectors import collection_ids_requested


class SearchRequestSerializer(serializers.Serializer):
    query = serializers.CharField(min_length=1, max_length=2000)
    top_k = serializers.IntegerField(min_value=1, max_value=50, required=False)
    collection = serializers.JSONField(required=False, allow_null=True,
                                       help_text="A collection id, or a list of them: search those only")


class SearchResultSerializer(serializers.Serializer):
    document_id = serializers.IntegerField()
    document_name = serializers.CharField()
    chunk_index = serializers.IntegerField()
    pages = serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2, allow_null=True)
    score = serializers.FloatField()
    text = serializers.CharField()


class SearchResponseSerializer(serializers.Serializer):
    results = SearchResultSerializer(many=True)


def _result(hit) -> dict:
    pages = [hit.page_start, hit.page_end] if hit.page_start is not None and hit.page_end is not None else None
    return {"document_id": hit.document_id, "document_name": hit.document_name, "chunk_index": hit.chunk_index,
            "pages": pages, "score": round(hit.score, 6), "text": hit.text}


class SearchView(AccountAPIView):
    """Each call embeds the query and is charged as a new operation (its own key)."""

    permission_classes = [allows(Action.SEARCH)]

    @extend_schema(request=SearchRequestSerializer, responses=SearchResponseSerializer,
                   description="Hybrid (vector + full text) search over the account's documents. "
                               "Charges the query's embedding tokens.")
    def post(self, request):
        body = SearchRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # An id the caller may not see is a 404, before anything is charged.
        collection_ids = collection_ids_requested(account=self.account, requested=body.validated_data.get("collection"))
        hits = search_for_query(account=self.account, query=body.validated_data["query"],
                                collection_ids=collection_ids,
                                top_k=body.validated_data.get("top_k"), key=f"search:{uuid.uuid4()}",
                                user=request.user, api_key=self.api_key)
        return Response({"results": [_result(hit) for hit in hits]})
