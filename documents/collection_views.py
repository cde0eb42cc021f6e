"""Pages for collections: the Collections section (owners and admins create, rename,
restrict, give access, delete) and moving a document to another collection. Thin: the
services check who may, the selectors what the principal may see (404 otherwise)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.models import ApiKey, Membership
from accounts.permissions import Action, principal_may
from documents import selectors, services
from documents.errors import CollectionError, NotFound


def _account(request):
    if request.account is None:
        raise Http404
    return request.account


def _collection(request, collection_id):
    try:
        return selectors.collection_access_by_id(account=_account(request), collection_id=collection_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc


def _is_manager(request) -> bool:
    return principal_may(request, Action.COLLECTIONS_MANAGE)


def _ids(request, name) -> list[int]:
    return [int(v) for v in request.POST.getlist(name) if v.isdigit()]


@login_required
def collections_view(request):
    account = _account(request)
    collections = list(selectors.collection_list(account=account))
    access = selectors.collection_access_by_collection(account=account, collections=collections)
    for collection in collections:
        rows = access.get(collection.pk, [])
        collection.user_ids = {r.user_id for r in rows if r.user_id}
        collection.key_ids = {r.api_key_id for r in rows if r.api_key_id}
    return render(request, "documents/collections.html", {
        "collections": collections, "manager": _is_manager(request),
        "members": Membership.objects.for_account(account).select_related("user").order_by("user__email"),
        "keys": ApiKey.objects.for_account(account).filter(revoked_at__isnull=True).order_by("name"),
    })


def _done(request, action):
    try:
        action()
    except CollectionError as exc:
        messages.error(request, exc.message)
    return redirect("documents:collections")


@login_required
@require_POST
def collection_create_view(request):
    def create():
        collection = services.collection_create(
            account=_account(request), actor=request.user, name=request.POST.get("name", ""),
            restricted=request.POST.get("restricted") == "on", user_ids=_ids(request, "users"),
            api_key_ids=_ids(request, "api_keys"))
        messages.success(request, f"Created {collection.name}.")
    return _done(request, create)


@login_required
@require_POST
def collection_update_view(request, collection_id: int):
    collection = _collection(request, collection_id)

    def update():
        services.collection_update(
            account=_account(request), actor=request.user, collection=collection, name=request.POST.get("name"),
            restricted=request.POST.get("restricted") == "on", user_ids=_ids(request, "users"),
            api_key_ids=_ids(request, "api_keys"))
        messages.success(request, "Saved.")
    return _done(request, update)


@login_required
@require_POST
def collection_delete_view(request, collection_id: int):
    collection = _collection(request, collection_id)

    def delete():
        services.collection_delete(account=_account(request), actor=request.user, collection=collection,
                                   move_documents=request.POST.get("move_documents") == "on")
        messages.success(request, f"Deleted {collection.name}.")
    return _done(request, delete)


@login_required
@require_POST
def document_move_view(request, document_id: int):
    account = _account(request)
    try:
        document = selectors.document_access_by_id(account=account, document_id=document_id)
        target = selectors.collection_access_by_id(account=account, collection_id=request.POST.get("collection"))
    except NotFound as exc:
        raise Http404(exc.message) from exc
    try:
        services.document_move(account=account, actor=request.user, document=document, collection=target)
    except CollectionError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Moved {document.name} to {target.name}.")
    return redirect("documents:document", document_id=document.pk)
