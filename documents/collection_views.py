"""Pages for collections: the Collections section (owners and admins create, rename,
restrict, give access, delete) and moving a document to another collection. Thin: the
services check who may, the selectors what the principal may see (404 otherwise)."""

from __future__ import annotations

from django.shortcuts import render
from django.urls import reverse

from accounts.models import ApiKey, Membership
from accounts.permissions import Action, principal_may
from core.pages import account_page, page_found, page_post
from documents import selectors, services
from documents.errors import CollectionError


def _collection(request, collection_id):
    return page_found(selectors.collection_access_by_id, account=request.account, collection_id=collection_id)


def _is_manager(request) -> bool:
    return principal_may(request, Action.COLLECTIONS_MANAGE)


def _ids(request, name) -> list[int]:
    return [int(v) for v in request.POST.getlist(name) if v.isdigit()]


@account_page()
def collections_view(request):
    account = request.account
    collections = list(selectors.collection_list(account=account))
    access = selectors.collection_access_by_collection(account=account, collections=collections)
    for collection in collections:
        rows = access.get(collection.pk, [])
        collection.user_ids = {r.user_id for r in rows if r.user_id}
        collection.key_ids = {r.api_key_id for r in rows if r.api_key_id}
    return render(
        request,
        "documents/collections.html",
        {
            "collections": collections,
            "manager": _is_manager(request),
            "members": Membership.objects.for_account(account).select_related("user").order_by("user__email"),
            "keys": ApiKey.objects.for_account(account).filter(revoked_at__isnull=True).order_by("name"),
        },
    )


def _done(request, act, success):
    return page_post(request, act, to="documents:collections", success=success, told=CollectionError)


@account_page(methods=("POST",))
def collection_create_view(request):
    return _done(
        request,
        lambda: services.collection_create(
            account=request.account,
            actor=request.user,
            name=request.POST.get("name", ""),
            restricted=request.POST.get("restricted") == "on",
            user_ids=_ids(request, "users"),
            api_key_ids=_ids(request, "api_keys"),
        ),
        lambda collection: f"Created {collection.name}.",
    )


@account_page(methods=("POST",))
def collection_update_view(request, collection_id: int):
    collection = _collection(request, collection_id)
    return _done(
        request,
        lambda: services.collection_update(
            account=request.account,
            actor=request.user,
            collection=collection,
            name=request.POST.get("name"),
            restricted=request.POST.get("restricted") == "on",
            user_ids=_ids(request, "users"),
            api_key_ids=_ids(request, "api_keys"),
        ),
        "Saved.",
    )


@account_page(methods=("POST",))
def collection_delete_view(request, collection_id: int):
    collection = _collection(request, collection_id)
    return _done(
        request,
        lambda: services.collection_delete(
            account=request.account,
            actor=request.user,
            collection=collection,
            move_documents=request.POST.get("move_documents") == "on",
        ),
        f"Deleted {collection.name}.",
    )


@account_page(methods=("POST",))
def document_move_view(request, document_id: int):
    account = request.account
    document = page_found(selectors.document_access_by_id, account=account, document_id=document_id)
    target = page_found(
        selectors.collection_access_by_id, account=account, collection_id=request.POST.get("collection")
    )
    return page_post(
        request,
        lambda: services.document_move(account=account, actor=request.user, document=document, collection=target),
        to=reverse("documents:document", args=[document.pk]),
        told=CollectionError,
        success=f"Moved {document.name} to {target.name}.",
    )
