"""Dify's External Knowledge API: `POST /api/v1/dify/retrieval`, so a Dify app can use a
Groundwork collection as its knowledge base (docs/api/dify.md).

Dify sends `{"knowledge_id", "query", "retrieval_setting": {"top_k", "score_threshold"},
"metadata_condition"?: {"logical_operator", "conditions": [{"name", "comparison_operator",
"value"}]}}` with `Authorization: Bearer <API key>` and reads `{"records": [{"content",
"score", "title", "metadata"}]}`. Errors are in Dify's shape, `{"error_code", "error_msg"}`:
1001 a missing or malformed Authorization header, 1002 an unknown or revoked key, 2001 a
knowledge base (collection) that does not exist for the key (missing, another account's,
restricted); any other refusal carries its HTTP status as the code (400, 402, 403, 429, 502).

`knowledge_id` is a collection id the key may read. The search is the one embed -> charge ->
search (`query_search`), charged like `POST search/`, with the account's excluded tags; the
only metadata Dify may filter on is `tags` (see `tags_from_condition`).
"""

from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from accounts.permissions import Action, allows
from core.authentication import ApiKeyAuthentication
from core.error_codes import CoreErrorCode
from core.errors import GroundworkError
from core.views import AccountAPIView
from documents.models import Document
from documents.selectors import collection_access_by_id
from retrieval.search.query import query_search

INVALID_AUTHORIZATION = 1001
AUTHORIZATION_FAILED = 1002
KNOWLEDGE_NOT_FOUND = 2001
MAX_TOP_K = 50
TAG_NAMES = {"tags", "tag"}
INCLUDE = {"contains", "is", "in"}
EXCLUDE = {"not contains", "is not", "not in"}


class DifyRequestError(GroundworkError):
    """A request Dify's shape allows but Groundwork cannot answer as asked (400)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(CoreErrorCode.BAD_REQUEST, message, status=400, field=field)


class _RetrievalSetting(serializers.Serializer):
    top_k = serializers.IntegerField(min_value=1, max_value=MAX_TOP_K)
    score_threshold = serializers.FloatField(min_value=0.0, max_value=1.0)


class DifyRetrievalRequest(serializers.Serializer):
    knowledge_id = serializers.CharField(max_length=40, help_text="A collection id the API key may read")
    query = serializers.CharField(max_length=2000)
    retrieval_setting = _RetrievalSetting()
    metadata_condition = serializers.JSONField(
        required=False, allow_null=True, help_text="Conditions on the metadata field `tags`"
    )


def _values(condition: dict) -> list[str]:
    value = condition.get("value")
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and v.strip() for v in values):
        raise DifyRequestError(
            "A tags condition needs a `value`: a tag, or a list of tags for in / not in.", field="metadata_condition"
        )
    return values


def tags_from_condition(condition) -> tuple[list[str] | None, list[str] | None]:
    """Dify's `metadata_condition` as search's (`tags`, `exclude_tags`).

    Only the metadata field `tags` (`name` "tags", or a list of names that are all "tags", as
    Dify's older requests send it). `contains` / `is` / `in` keep documents carrying the
    value(s) and `not contains` / `is not` / `not in` leave them out. Search keeps documents
    with ANY of the tags asked for, so several keeping conditions need `logical_operator`
    "or" (or one `in` condition); leaving out is combined with "and". What cannot be
    answered exactly is a 400 that says so, never a different result."""
    if not condition:
        return None, None
    if not isinstance(condition, dict) or not isinstance(condition.get("conditions", []), list):
        raise DifyRequestError(
            'metadata_condition must be {"logical_operator": "and"|"or", "conditions": [...]}.',
            field="metadata_condition",
        )
    operator = str(condition.get("logical_operator") or "and").lower()
    if operator not in ("and", "or"):
        raise DifyRequestError('logical_operator must be "and" or "or".', field="metadata_condition")
    include, exclude, kept = [], [], 0
    for item in condition.get("conditions") or []:
        names = item.get("name") if isinstance(item, dict) else None
        names = names if isinstance(names, list) else [names]
        if not names or not all(isinstance(n, str) and n.lower() in TAG_NAMES for n in names):
            raise DifyRequestError("Groundwork filters on one metadata field, `tags`.", field="metadata_condition")
        comparison = str(item.get("comparison_operator") or "").lower()
        if comparison in INCLUDE:
            include += _values(item)
            kept += 1
        elif comparison in EXCLUDE:
            exclude += _values(item)
        else:
            raise DifyRequestError(
                "For tags, use contains, is, in (documents carrying them) or not contains, is not, "
                "not in (documents without them).",
                field="metadata_condition",
            )
    conditions = len(condition.get("conditions") or [])
    if operator == "and" and kept > 1:
        raise DifyRequestError(
            'Documents carrying any of several tags: one "in" condition, or logical_operator '
            '"or"; a document carrying all of them cannot be asked for.',
            field="metadata_condition",
        )
    if operator == "or" and exclude and conditions > 1:
        raise DifyRequestError(
            'Leaving documents out by tag combines with "and", not "or".', field="metadata_condition"
        )
    return include or None, exclude or None


def _malformed(authorization: str | None) -> bool:
    """Not `Bearer <key>`: 1001, where an unknown key is 1002."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    return scheme.lower() != "bearer" or not token.strip()


def _score(hit) -> float:
    """Dify's 0-1 relevance: the cosine similarity of the vector match (0 for a chunk that
    full text alone found)."""
    return round(min(1.0, max(0.0, hit.vector_similarity or 0.0)), 4)


class DifyRetrievalView(AccountAPIView):
    """Each call embeds the query and is charged as a new operation, like `POST search/`."""

    authentication_classes = [ApiKeyAuthentication]
    permission_classes = [allows(Action.SEARCH)]

    @extend_schema(
        request=DifyRetrievalRequest,
        responses=inline_serializer("DifyRecords", {"records": serializers.ListField(child=serializers.DictField())}),
        description="Dify's External Knowledge API: the collection `knowledge_id`'s best chunks for `query`.",
    )
    def post(self, request):
        body = DifyRetrievalRequest(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        collection = collection_access_by_id(account=self.account, collection_id=data["knowledge_id"])
        tags, exclude_tags = tags_from_condition(data.get("metadata_condition"))
        setting = data["retrieval_setting"]
        found = query_search(
            account=self.account,
            query=data["query"],
            collection_ids=[collection.pk],
            top_k=setting["top_k"],
            key=f"dify:{uuid.uuid4()}",
            api_key=self.api_key,
            tags=tags,
            exclude_tags=exclude_tags,
        )
        hits = [hit for hit in found.hits if _score(hit) >= setting["score_threshold"]]
        tags_of = dict(
            Document.objects.for_account(self.account)
            .filter(pk__in={h.document_id for h in hits})
            .values_list("pk", "tags")
        )
        return Response(
            {
                "records": [
                    {
                        "content": hit.text,
                        "score": _score(hit),
                        "title": hit.document_name,
                        "metadata": {
                            "document_id": hit.document_id,
                            "chunk_index": hit.chunk_index,
                            "pages": [hit.page_start, hit.page_end] if hit.page_start is not None else None,
                            "tags": list(tags_of.get(hit.document_id, [])),
                            "collection_id": collection.pk,
                        },
                    }
                    for hit in hits
                ]
            }
        )

    def handle_exception(self, exc):
        """Every refusal in Dify's shape, `{"error_code", "error_msg"}`, with its HTTP status."""
        response = super().handle_exception(exc)
        error = (response.data or {}).get("error", {}) if isinstance(response.data, dict) else {}
        code, message = response.status_code, error.get("message") or "The request was refused."
        if code == 401 and not _malformed(self.request.headers.get("Authorization")):
            code, message = AUTHORIZATION_FAILED, "Authorization failed: the API key is unknown or has been revoked."
        elif code == 401:
            code, message = (
                INVALID_AUTHORIZATION,
                (
                    "Invalid Authorization header format. Expected 'Bearer <api-key>' "
                    "format, with a Groundwork API key (gw_…)."
                ),
            )
        elif code == 404:
            code, message = (
                KNOWLEDGE_NOT_FOUND,
                ("The knowledge does not exist: knowledge_id must be the id of a collection this API key may read."),
            )
        response.data = {"error_code": code, "error_msg": message}
        return response
