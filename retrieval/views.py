"""The Knowledge base's "Embedding model" section (the migration the settings ask for, its
credit estimate before it starts, its progress while it runs) and starting it (thin views).
The section is drawn into documents' Knowledge base page by the `embedding_model_panel`
template tag (retrieval/templatetags/retrieval.py): documents sits below retrieval."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.permissions import Action, page_requires, principal_may
from billing.errors import BillingError
from documents.embedding import active_embedding_model
from documents.models import ReindexRun
from retrieval import services
from retrieval.embedding_models import model_change


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
