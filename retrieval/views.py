"""The Knowledge base's "Embedding model" section (the migration the settings ask for, its
credit estimate before it starts, its progress while it runs) and starting it, and the
Knowledge base's "Retrieval test" tab (thin views).
The section is drawn into documents' Knowledge base page by the `embedding_model_panel`
template tag (retrieval/templatetags/retrieval.py): documents sits below retrieval."""

from __future__ import annotations

import uuid

from django import forms
from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect, render

from accounts.permissions import Action, page_check, principal_may
from billing import pricing
from billing.errors import BillingError
from core.errors import GroundworkError
from core.pages import account_page
from documents.embedding import active_embedding_model
from documents.models import ReindexRun
from documents.selectors import collection_ids_requested, collection_list
from documents.tags import tags_from_form
from retrieval import services
from retrieval.embedding_models import model_change
from retrieval.explain import explained_search
from retrieval.search.query import query_search

# What the page quotes before a search: a question of a dozen words is about 16 tokens
# with the embedding model's [CLS] and [SEP] (MiniLM's WordPiece: 14-18 for the bench's
# questions); the charge itself is the provider's count, shown after the search.
TYPICAL_QUERY_TOKENS = 16


def embedding_panel(request, account) -> dict:
    """The section's context: the active model, the change the settings ask for (with its
    estimate), the latest migration run, and whether this principal may start or cancel it."""
    return {
        "active": active_embedding_model(account_id=account.pk),
        "change": model_change(account=account),
        "run": ReindexRun.objects.for_account(account)
        .filter(kind=ReindexRun.RunKind.MIGRATION)
        .order_by("-created_at")
        .first(),
        "may_migrate": principal_may(request, Action.ACCOUNT_REINDEX),
    }


@account_page(page_check(Action.ACCOUNT_REINDEX), methods=("POST",))
def embedding_migration_start_view(request):
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
            messages.success(
                request,
                f"Moving to {run.embedding_model}. Search keeps using the current model "
                "until every document has new vectors.",
            )
    return redirect("documents:knowledge-base")


class RetrievalTestForm(forms.Form):
    """The search API's body, as a form (the same bounds as retrieval.api.SearchRequestSerializer)."""

    query = forms.CharField(
        max_length=2000,
        strip=True,
        error_messages={"required": "Type what to search for.", "max_length": "A query is at most 2,000 characters."},
    )
    top_k = forms.IntegerField(
        min_value=1,
        max_value=50,
        required=False,
        error_messages={"invalid": "Results must be a whole number from 1 to 50."},
    )
    collection = forms.CharField(required=False)
    # Comma-separated, as on the Knowledge base (documents/tags.py's rules, checked by the search).
    tags = forms.CharField(required=False, max_length=900)
    exclude_tags = forms.CharField(required=False, max_length=900)


def _retrieval_test_search(request, form: RetrievalTestForm) -> dict:
    """embed -> charge -> search (query_search, as the search API does), explained."""
    account, data = request.account, form.cleaned_data
    found = query_search(
        account=account,
        query=data["query"],
        top_k=data["top_k"],
        collection_ids=collection_ids_requested(account=account, requested=data["collection"]),
        key=f"search:{uuid.uuid4()}",
        user=request.user,
        explain=True,
        tags=tags_from_form([data["tags"]]) or None,
        exclude_tags=tags_from_form([data["exclude_tags"]]) or None,
    )
    return explained_search(found, threshold=settings.RAG_MATCH_THRESHOLD)


@account_page(page_check(Action.SEARCH), methods=("GET", "POST"))
def retrieval_test_view(request):
    """Type a query, see what search finds: each path's rank and score, the fused score, the
    threshold, what passed and what did not, and what the search cost. A plain form POST
    (works without JavaScript; every text from a document is escaped by the template)."""
    form = RetrievalTestForm(request.POST if request.method == "POST" else None)
    answer, error, status = None, None, 200
    if form.is_valid():
        try:
            answer = _retrieval_test_search(request, form)
        except GroundworkError as exc:  # not enough credits, a budget, the provider, a collection
            error, status = exc.message, exc.status
    active = active_embedding_model(account_id=request.account.pk)
    return render(
        request,
        "retrieval/retrieval_test.html",
        {
            "form": form,
            "answer": answer,
            "error": error,
            "tab": "retrieval-test",
            "collections": collection_list(account=request.account),
            "threshold": settings.RAG_MATCH_THRESHOLD,
            "default_top_k": settings.RAG_TOP_K,
            "credits_estimate": pricing.credits_for(
                kind=pricing.EMBEDDING, tokens=TYPICAL_QUERY_TOKENS, model=active.model
            ),
        },
        status=status,
    )
