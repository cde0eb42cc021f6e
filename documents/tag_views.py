"""Knowledge base forms for tags (thin views): a document's tags, and the account's excluded
tags (owners and admins). Both take tags as one comma-separated field (documents/tags.py)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect

from accounts.permissions import Action, page_check, page_require
from core.pages import account_page
from documents.errors import TagsInvalid
from documents.tags import document_tags_set, retrieval_exclude_tags_set, tags_from_form
from documents.views import _back_to_list_or, _document


@account_page(methods=("POST",))
def document_tags_view(request, document_id: int):
    document = _document(request, document_id)
    page_require(request, Action.DOCUMENT_TAG, document)  # a member: only their own
    try:
        document = document_tags_set(
            account=request.account,
            actor=request.user,
            document=document,
            tags=tags_from_form(request.POST.getlist("tags")),
        )
    except TagsInvalid as exc:
        messages.error(request, f"{document.name}: {exc.message}")
    else:
        messages.success(request, f"Tags of {document.name}: {', '.join(document.tags) or 'none'}.")
    return _back_to_list_or(request, redirect("documents:document", document_id=document.pk))


@account_page(page_check(Action.RETRIEVAL_SETTINGS), methods=("POST",))
def exclude_tags_view(request):
    try:
        tags = retrieval_exclude_tags_set(
            account=request.account,
            actor=request.user,
            exclude_tags=tags_from_form(request.POST.getlist("exclude_tags")),
        )
    except TagsInvalid as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            "Documents tagged " + ", ".join(tags) + " are excluded from answers."
            if tags
            else "No tag is excluded from answers.",
        )
    return _back_to_list_or(request, redirect("documents:knowledge-base"))
