"""The Sources page of the Knowledge base: add a source, sync now, delete, each source's
status and the history of its syncs (thin: the services check, the selectors scope)."""

from __future__ import annotations

from django.shortcuts import render

from accounts.permissions import Action, page_check, page_require, principal_may
from core.pages import account_page, page_found, page_post
from documents.tags import tags_from_form
from sources import selectors, services
from sources.kinds import registry
from sources.models import Schedule, SourceStatus


def _source(request, source_id):
    return page_found(selectors.source_access_by_id, account=request.account, source_id=source_id)


@account_page(page_check(Action.DOCUMENT_READ))
def sources_view(request):
    account = request.account
    sources = list(selectors.source_list(account=account)[:100])
    for source in sources:
        source.history = list(selectors.sync_list(account=account, source=source, limit=10))
        source.may_delete = principal_may(request, Action.DOCUMENT_DELETE, source)
    return render(
        request,
        "sources/sources.html",
        {
            "sources": sources,
            "schedules": Schedule.choices,
            "kinds": list(registry().values()),
            "syncing": any(s.status == SourceStatus.SYNCING for s in sources),
            "may_add": principal_may(request, Action.DOCUMENT_UPLOAD),
        },
    )


@account_page(page_check(Action.DOCUMENT_UPLOAD), methods=("POST",))
def source_create_view(request):
    def create():
        max_pages = request.POST.get("max_pages", "").strip()
        kind = request.POST.get("kind") or next(iter(registry()))
        return services.source_create(
            account=request.account,
            actor=request.user,
            kind=kind,
            url=request.POST.get("url", ""),
            max_pages=int(max_pages) if max_pages.isdigit() else (max_pages or None),
            schedule=request.POST.get("schedule") or None,
            options=_options_from_form(request.POST, kind),
            tags=tags_from_form(request.POST.getlist("tags")),
        )

    return page_post(
        request, create, to="sources:sources", success=lambda source: f"Added {source.url}; its first sync has started."
    )


def _options_from_form(data, kind: str) -> dict:
    """The chosen kind's options as the form gave them (`<kind>-<option>` fields; empty ones
    left out); the kind checks them."""
    options = registry()[kind].options if kind in registry() else ()
    given = {option.name: data.get(f"{kind}-{option.name}", "").strip() for option in options}
    return {name: value for name, value in given.items() if value}


@account_page(methods=("POST",))
def source_sync_view(request, source_id: int):
    source = _source(request, source_id)
    page_require(request, Action.DOCUMENT_UPLOAD)
    return page_post(
        request,
        lambda: services.source_sync_request(account=request.account, source=source, actor=request.user),
        to="sources:sources",
        success=f"Syncing {source.url}.",
    )


@account_page(methods=("POST",))
def source_delete_view(request, source_id: int):
    source = _source(request, source_id)
    page_require(request, Action.DOCUMENT_DELETE, source)
    return page_post(
        request,
        lambda: services.source_delete(account=request.account, source=source, actor=request.user),
        to="sources:sources",
        success=f"Deleted {source.url}; its documents are being removed.",
    )
