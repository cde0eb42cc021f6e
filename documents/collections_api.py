"""`/api/v1/collections/`: the collections the caller may see; owners and admins create,
rename, restrict (with the members and keys given access) and delete them.

A collection the caller may not see (another account's, or restricted without access)
answers exactly like a missing one: 404. Changing collections is for owners and admins
(403 for members, viewers and API keys), as keys and members are.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response

from accounts.permissions import Action, allows
from core.views import AccountAPIView
from documents import selectors, services
from documents.serializers import CollectionSerializer, CollectionWriteSerializer, DocumentSerializer


def _one(account, collection) -> dict:
    rows = list(selectors.collection_access_list(account=account, collection=collection))
    fresh = selectors.collection_access_by_id(account=account, collection_id=collection.pk)
    return CollectionSerializer(fresh, context={"access": {collection.pk: rows}}).data


class CollectionListView(AccountAPIView):
    permission_classes = [allows(GET=Action.DOCUMENT_READ, POST=Action.COLLECTIONS_MANAGE)]

    @extend_schema(responses=inline_serializer("CollectionList", {"results": CollectionSerializer(many=True)}))
    def get(self, request):
        account = self.account
        collections = list(selectors.collection_list(account=account))
        access = selectors.collection_access_by_collection(account=account, collections=collections)
        return Response({"results": CollectionSerializer(collections, many=True, context={"access": access}).data})

    @extend_schema(request=CollectionWriteSerializer, responses={201: CollectionSerializer})
    def post(self, request):
        body = CollectionWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        account = self.account
        collection = services.collection_create(
            account=account,
            actor=self.user,
            name=data.get("name", ""),
            restricted=data.get("restricted", False),
            user_ids=data.get("users", ()),
            api_key_ids=data.get("api_keys", ()),
        )
        return Response(_one(account, collection), status=status.HTTP_201_CREATED)


class CollectionDetailView(AccountAPIView):
    permission_classes = [
        allows(GET=Action.DOCUMENT_READ, PATCH=Action.COLLECTIONS_MANAGE, DELETE=Action.COLLECTIONS_MANAGE)
    ]

    @extend_schema(responses=CollectionSerializer)
    def get(self, request, collection_id: int):
        account = self.account
        collection = selectors.collection_access_by_id(account=account, collection_id=collection_id)
        return Response(_one(account, collection))

    @extend_schema(request=CollectionWriteSerializer, responses=CollectionSerializer)
    def patch(self, request, collection_id: int):
        account = self.account
        collection = selectors.collection_access_by_id(account=account, collection_id=collection_id)
        body = CollectionWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        services.collection_update(
            account=account,
            actor=self.user,
            collection=collection,
            name=data.get("name"),
            restricted=data.get("restricted"),
            user_ids=data.get("users"),
            api_key_ids=data.get("api_keys"),
        )
        return Response(_one(account, collection))

    @extend_schema(
        request=None,
        responses={204: None},
        parameters=[
            OpenApiParameter(
                "move_documents",
                int,
                enum=[0, 1],
                required=False,
                description="1: move its documents to the default collection "
                "first (else a collection with documents is a 409)",
            )
        ],
    )
    def delete(self, request, collection_id: int):
        account = self.account
        collection = selectors.collection_access_by_id(account=account, collection_id=collection_id)
        services.collection_delete(
            account=account,
            actor=self.user,
            collection=collection,
            move_documents=request.query_params.get("move_documents") in ("1", "true"),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class DocumentMoveView(AccountAPIView):
    """`POST documents/{id}/move/` `{"collection": id}`: move a document to another collection."""

    permission_classes = [allows(Action.COLLECTIONS_MANAGE)]

    @extend_schema(
        request=inline_serializer("DocumentMove", {"collection": serializers.IntegerField()}),
        responses=DocumentSerializer,
    )
    def post(self, request, document_id: int):
        account = self.account
        document = selectors.document_access_by_id(account=account, document_id=document_id)
        target = selectors.collection_access_by_id(account=account, collection_id=request.data.get("collection"))
        document = services.document_move(account=account, actor=self.user, document=document, collection=target)
        return Response(DocumentSerializer(document).data)
