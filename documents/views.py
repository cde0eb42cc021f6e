"""Knowledge base pages: list + upload, a document's page, delete and reindex (thin views)."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from accounts.permissions import (
    Action,
    Forbidden,
    grant_of,
    page_check,
    page_require,
    principal_may,
    refusal_message,
)
from billing import pricing, references
from billing.errors import BillingError
from billing.selectors import balance_get, ledger_list
from core.pages import account_page, page_found, page_post
from documents import images, progress, selectors, services
from documents.chunk_preview import chunk_blocks
from documents.embedding import active_embedding_model
from documents.errors import TagsInvalid, UploadRejected
from documents.kinds import FORMATS_IN_WORDS, KIND_BY_NAME, UPLOAD_ACCEPT, UPLOAD_HINT
from documents.serializers import DocumentSerializer
from documents.storage import file_open
from documents.tags import retrieval_exclude_tags, tags_excluded, tags_from_form

# A 314-chunk PDF is 13 pages of 25, each one screen or two, instead of one page 225,000 px tall.
CHUNKS_PER_PAGE = 25


def _document(request, document_id):
    return page_found(selectors.document_access_by_id, account=request.account, document_id=document_id)


def _int_or_none(value) -> int | None:
    """A chunk index from the query string, or None (also for one the database cannot hold)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if 0 <= number < 2**31 else None


def _back_to_list_or(request, default):
    """Where a form posted from the knowledge base list returns: the list as it was (its
    `next`, same filters), if `next` is that list on this site; else `default`."""
    target = request.POST.get("next") or ""
    if target.startswith(reverse("documents:knowledge-base")) and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(target)
    return default


def _with_permissions(request, documents) -> list:
    """Each document with `may_delete` and `may_tag` (a member: only their own), for its
    Delete button and its tags form."""
    documents = list(documents)
    for document in documents:
        document.may_delete = principal_may(request, Action.DOCUMENT_DELETE, document)
        document.may_tag = principal_may(request, Action.DOCUMENT_TAG, document)
    return documents


@account_page(page_check(Action.DOCUMENT_READ))
def knowledge_base_view(request):
    account = request.account
    status = request.GET.get("status") or None
    query = (request.GET.get("q") or "").strip() or None
    tag = (request.GET.get("tag") or "").strip() or None
    collections = list(selectors.collection_list(account=account))
    collection = (
        page_found(selectors.collection_access_by_id, account=account, collection_id=request.GET["collection"])
        if request.GET.get("collection")
        else None
    )
    documents = _with_permissions(
        request,
        selectors.document_list(
            account=account, status=status, query=query, collection_ids=[collection.pk] if collection else None, tag=tag
        )[:200],
    )
    exclude_tags = retrieval_exclude_tags(account=account)
    shown = progress.page_context(documents)  # once for the page, not per row
    for document in documents:
        document.excluded = tags_excluded(document.tags, exclude_tags)
        document.progress_words = shown.text(document)
    return render(
        request,
        "documents/knowledge_base.html",
        {
            "documents": documents,
            "status": status or "",
            "query": query or "",
            "tag": tag or "",
            "exclude_tags": exclude_tags,
            "collections": collections,
            "collection": collection,
            # The live rows (static/js/knowledge_base.js) show the same buttons as the server's.
            "delete_grant": grant_of(request, Action.DOCUMENT_DELETE).value,  # yes, own or no
            "may_reindex": principal_may(request, Action.DOCUMENT_REINDEX),
            "may_reindex_all": principal_may(request, Action.ACCOUNT_REINDEX),
            "run": selectors.reindex_run_current(account=account),
            # The picker's accept list and hint come from the kinds registry (documents/kinds.py).
            "upload_accept": UPLOAD_ACCEPT,
            "upload_hint": UPLOAD_HINT,
            "formats_in_words": FORMATS_IN_WORDS,
            "charge_note": _charge_note(account),
        },
    )


def _charge_note(account) -> str:
    """What a document's "tokens embedded · credits charged" are: the ledger's tokens (what the
    embedding model was sent and reported) and credits (those tokens at its price), and why
    they are more than the text's own tokens."""
    model = active_embedding_model(account_id=account.pk).model
    price = pricing.rate(kind=pricing.EMBEDDING, model=model)
    at = f"{price:,} credits per 1,000 tokens" + (" (1 credit per token)" if price == 1000 else "")
    return (
        f"Tokens embedded: what the embedding model was sent and counted, as the ledger shows them: each "
        f"passage with its title and headings, and the text passages share (they overlap) in each. "
        f"Credits: those tokens at {at} for {model}, plus an image's description where a vision model "
        f"wrote one."
    )


@account_page(page_check(Action.DOCUMENT_READ))
def documents_status_view(request):
    """JSON for the live status badges (polled by the knowledge base page)."""
    account = request.account
    documents = _with_permissions(request, selectors.document_list(account=account)[:200])
    rows = DocumentSerializer(documents, many=True).data
    for row, document in zip(rows, documents):
        row["may_delete"] = document.may_delete
    return JsonResponse({"documents": rows, "credits_remaining": balance_get(account=account)})


@account_page(methods=("POST",))
def upload_view(request):
    """One file per request (the page sends each file on its own, with its progress bar)."""
    account = request.account
    wants_json = request.headers.get("Accept", "").startswith("application/json")
    if wants_json and not principal_may(request, Action.DOCUMENT_UPLOAD):
        refused = Forbidden(refusal_message(request, Action.DOCUMENT_UPLOAD))
        return JsonResponse({"error": {"code": refused.code, "message": refused.message}}, status=refused.status)
    page_require(request, Action.DOCUMENT_UPLOAD)
    try:
        services.upload_request_check(content_length=request.META.get("CONTENT_LENGTH"))
        collection = (
            page_found(selectors.collection_access_by_id, account=account, collection_id=request.POST["collection"])
            if request.POST.get("collection")
            else None
        )
        document, created = services.document_upload(
            account=account,
            actor=request.user,
            upload=request.FILES.get("file"),
            collection=collection,
            tags=tags_from_form(request.POST.getlist("tags")),
        )
    except (UploadRejected, BillingError, TagsInvalid) as exc:
        if wants_json:
            return JsonResponse({"error": {"code": exc.code, "message": exc.message}}, status=exc.status)
        messages.error(request, exc.message)
        return redirect("documents:knowledge-base")
    if wants_json:
        return JsonResponse(
            {"document": DocumentSerializer(document).data, "created": created}, status=202 if created else 200
        )
    messages.success(request, f"Uploaded {document.name}." if created else f"{document.name} is already here.")
    return redirect("documents:knowledge-base")


@account_page(page_check(Action.DOCUMENT_READ))
def document_view(request, document_id: int):
    """The document and one page of its chunks: `?page=N`, or `?chunk=I` for the page that
    holds chunk I (a citation's link), which is then highlighted."""
    account = request.account
    document = _document(request, document_id)
    chunks = selectors.chunk_list(account=account, document=document)
    highlight = _int_or_none(request.GET.get("chunk"))
    page_number = request.GET.get("page")
    if highlight is not None:
        page_number = chunks.filter(chunk_index__lt=highlight).count() // CHUNKS_PER_PAGE + 1
    chunk_page = Paginator(chunks, CHUNKS_PER_PAGE).get_page(page_number)
    for chunk in chunk_page:
        chunk.blocks = chunk_blocks(chunk.content)
    charges = ledger_list(account=account).filter(reference__startswith=references.document_prefix(document.pk))
    return render(
        request,
        "documents/document.html",
        {
            "document": document,
            "chunk_page": chunk_page,
            "charges": charges,
            "highlight": highlight,
            "is_image": images.is_image(document.kind),
            "has_vision": images.is_image(document.kind) and chunks.filter(text_source="vision").exists(),
            "highlight_shown": highlight is not None and any(c.chunk_index == highlight for c in chunk_page),
            # A slide deck's chunks are numbered by slide (stored as pages, so `pages` works alike).
            "page_word": "slide" if document.content_type == KIND_BY_NAME["pptx"].content_type else "page",
            "collections": selectors.collection_list(account=account),
            "may_delete": principal_may(request, Action.DOCUMENT_DELETE, document),
            "may_reindex": principal_may(request, Action.DOCUMENT_REINDEX),
            "may_tag": principal_may(request, Action.DOCUMENT_TAG, document),
            "excluded": tags_excluded(document.tags, retrieval_exclude_tags(account=account)),
            "charge_note": _charge_note(account),
        },
    )


@account_page(page_check(Action.DOCUMENT_READ))
def document_image_view(request, document_id: int):
    """The uploaded image itself, for its document page: only to a reader of the document
    (another account, or a member outside its restricted collection, gets 404), never from a
    public media URL, and never for a document that is not an image."""
    document = _document(request, document_id)
    if not images.is_image(document.kind):
        raise Http404
    response = FileResponse(file_open(document.file.name), content_type=document.content_type)
    response["Content-Disposition"] = "inline"
    response["Cache-Control"] = "private, max-age=300"
    return response


@account_page(methods=("POST",))
def delete_view(request, document_id: int):
    document = _document(request, document_id)
    page_require(request, Action.DOCUMENT_DELETE, document)  # a member: only their own
    document = services.document_delete(account=request.account, document=document)
    messages.success(request, f"Deleted {document.name}.")
    return redirect("documents:knowledge-base")


@account_page(page_check(Action.DOCUMENT_REINDEX), methods=("POST",))
def reindex_view(request, document_id: int):
    try:
        document = services.document_reindex(account=request.account, document=_document(request, document_id))
    except BillingError as exc:
        messages.error(request, exc.message)
        return _back_to_list_or(request, redirect("documents:document", document_id=document_id))
    messages.success(request, f"Reindexing {document.name}.")
    return _back_to_list_or(request, redirect("documents:document", document_id=document.pk))


@account_page(page_check(Action.ACCOUNT_REINDEX), methods=("POST",))
def account_reindex_view(request):
    return page_post(
        request,
        lambda: services.account_reindex_start(account=request.account, actor=request.user),
        to="documents:knowledge-base",
        told=BillingError,
        success="Reindexing every document. Search keeps working meanwhile.",
    )


@account_page(page_check(Action.ACCOUNT_REINDEX), methods=("POST",))
def account_reindex_cancel_view(request, run_id: int):
    run = page_found(selectors.reindex_run_access_by_id, account=request.account, run_id=run_id)
    services.account_reindex_cancel(account=request.account, run=run)
    messages.success(request, "Reindex cancelled.")
    return redirect("documents:knowledge-base")


@account_page(page_check(Action.DOCUMENT_REINDEX), methods=("POST",))
def reindex_cancel_view(request, document_id: int):
    document = services.document_reindex_cancel(account=request.account, document=_document(request, document_id))
    messages.success(
        request,
        f"Reindex of {document.name} cancelled."
        if document.status == "ready"
        else f"{document.name}: nothing to cancel."
        if document.status != "failed"
        else f"Processing of {document.name} cancelled.",
    )
    return redirect("documents:document", document_id=document.pk)
