"""Knowledge base forms for tags (thin views): a document's tags, and the account's excluded
tags (owners and admins). Both take tags as one comma-separated field (documents/tags.py)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.permissions import Action, page_require, page_requires
from documents.errors import TagsInvalid
from documents.tags import document_tags_set, retrieval_exclude_tags_set, tags_from_form
from documents.views import _account, _back_to_list_or, _document


@login_required
@require_POST
def document_tags_view(request, document_id: int):
    document = _document(request, document_id)
    page_require(request, Action.DOCUMENT_TAG, document)  # a member: only their own
    try:
        document = document_tags_set(account=_account(request), actor=request.user, document=document,
                                     tags=tags_from_form(request.POST.getlist("tags")))
    except TagsInvalid as exc:
        messages.error(request, f"{document.name}: {exc.message}")
    else:
        messages.success(request, f"Tags of {document.name}: {', '.join(document.tags) or 'none'}.")
    return _back_to_list_or(request, redirect("documents:document", document_id=document.pk))


@login_required
@require_POST
@page_requires(Action.RETRIEVAL_SETTINGS)
def exclude_tags_view(request):
    try:
        tags = retrieval_exclude_tags_set(account=_account(request), actor=request.user,
                                          exclude_tags=tags_from_form(request.POST.getlist("exclude_tags")))
    except TagsInvalid as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Documents tagged " + ", ".join(tags) + " are excluded from answers." if tags
                         else "No tag is excluded from answers.")
    return _back_to_list_or(request, redirect("documents:knowledge-base"))
