"""The Sources page of the Knowledge base: add a source, sync now, delete, each source's
status and the history of its syncs (thin: the services check, the selectors scope)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.permissions import Action, page_require, principal_may
from core.errors import GroundworkError
from documents.tags import tags_from_form
from sources import selectors, services
from sources.errors import SourceNotFound
from sources.kinds import registry
from sources.models import Schedule, SourceStatus


def _account(request):
    if request.account is None:
        raise Http404
    return request.account


def _source(request, source_id):
    try:
        return selectors.source_access_by_id(account=_account(request), source_id=source_id)
    except SourceNotFound as exc:
        raise Http404(exc.message) from exc


@login_required
def sources_view(request):
    account = _account(request)
    page_require(request, Action.DOCUMENT_READ)
    sources = list(selectors.source_list(account=account)[:100])
    for source in sources:
        source.history = list(selectors.sync_list(account=account, source=source, limit=10))
        source.may_delete = principal_may(request, Action.DOCUMENT_DELETE, source)
    return render(request, "sources/sources.html", {
        "sources": sources, "schedules": Schedule.choices, "kinds": list(registry().values()),
        "syncing": any(s.status == SourceStatus.SYNCING for s in sources),
        "may_add": principal_may(request, Action.DOCUMENT_UPLOAD)})


def _done(request, action):
    try:
        action()
    except GroundworkError as exc:
        messages.error(request, exc.message)
    return redirect("sources:sources")


@login_required
@require_POST
def source_create_view(request):
    account = _account(request)
    page_require(request, Action.DOCUMENT_UPLOAD)

    def create():
        max_pages = request.POST.get("max_pages", "").strip()
        kind = request.POST.get("kind") or next(iter(registry()))
        source = services.source_create(
            account=account, actor=request.user, kind=kind, url=request.POST.get("url", ""),
            max_pages=int(max_pages) if max_pages.isdigit() else (max_pages or None),
            schedule=request.POST.get("schedule") or None, options=_options_from_form(request.POST, kind),
            tags=tags_from_form(request.POST.getlist("tags")))
        messages.success(request, f"Added {source.url}; its first sync has started.")
    return _done(request, create)


def _options_from_form(data, kind: str) -> dict:
    """The chosen kind's options as the form gave them (`<kind>-<option>` fields; empty ones
    left out); the kind checks them."""
    options = registry()[kind].options if kind in registry() else ()
    given = {option.name: data.get(f"{kind}-{option.name}", "").strip() for option in options}
    return {name: value for name, value in given.items() if value}


@login_required
@require_POST
def source_sync_view(request, source_id: int):
    source = _source(request, source_id)
    page_require(request, Action.DOCUMENT_UPLOAD)

    def sync():
        services.source_sync_request(account=_account(request), source=source, actor=request.user)
        messages.success(request, f"Syncing {source.url}.")
    return _done(request, sync)


@login_required
@require_POST
def source_delete_view(request, source_id: int):
    source = _source(request, source_id)
    page_require(request, Action.DOCUMENT_DELETE, source)

    def delete():
        services.source_delete(account=_account(request), source=source, actor=request.user)
        messages.success(request, f"Deleted {source.url}; its documents are being removed.")
    return _done(request, delete)
