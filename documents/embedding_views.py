"""The Knowledge base's "Embedding model" section (the migration the settings ask for, its
credit estimate before it starts, its progress while it runs) and cancelling a document's
reindex (thin views)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.permissions import Action, page_requires, principal_may
from billing.errors import BillingError
from documents import selectors, services
from documents.errors import NotFound
from documents.embedding_models import active_embedding_model, model_change
from documents.models import ReindexRun


def embedding_panel(request, account) -> dict:
    """The section's context: the active model, the change the settings ask for (with its
    estimate), the latest migration run, and whether this principal may start or cancel it."""
    return {
        "active": active_embedding_model(account_id=account.pk),
        "change": model_change(account=account),
        "run": ReindexRun.objects.for_account(account).filter(kind=ReindexRun.RunKind.MIGRATION)
        .order_by("-created_at").first(),
        "may_migrate": principal_may(request, Action.ACCOUNT_REINDEX),
    }


@login_required
@require_POST
@page_requires(Action.ACCOUNT_REINDEX)
def embedding_migration_start_view(request):
    if request.account is None:
        raise Http404
    try:
        run = services.embedding_migration_start(account=request.account, actor=request.user)
    except BillingError as exc:
        messages.error(request, exc.message)
    else:
        if run is None:
            messages.info(request, "Search already uses the configured embedding model.")
        elif run.kind != ReindexRun.RunKind.MIGRATION:
            messages.error(request, "A reindex is running; start the migration when it is done.")
        else:
            messages.success(request, f"Moving to {run.embedding_model}. Search keeps using the current model "
                                      "until every document has new vectors.")
    return redirect("documents:knowledge-base")


@login_required
@require_POST
@page_requires(Action.DOCUMENT_REINDEX)
def reindex_cancel_view(request, document_id: int):
    if request.account is None:
        raise Http404
    try:
        document = selectors.document_access_by_id(account=request.account, document_id=document_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    document = services.document_reindex_cancel(account=request.account, document=document)
    messages.success(request, f"Reindex of {document.name} cancelled." if document.status == "ready"
                     else f"{document.name}: nothing to cancel." if document.status != "failed"
                     else f"Processing of {document.name} cancelled.")
    return redirect("documents:document", document_id=document.pk)
