"""The home page (it shows documents and conversations, so it sits above both apps) and the
error pages: JSON under /api/ and /v1/, friendly HTML elsewhere."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponseServerError, JsonResponse
from django.shortcuts import render
from django.template import loader

from accounts.forms import AccountForm
from accounts.middleware import request_account_context
from chat.selectors import conversation_list
from core.api import STATUS_MESSAGES
from core.errors import error_body
from core.middleware import is_api_path
from documents.kinds import FORMATS_IN_WORDS
from documents.selectors import document_list


@login_required
def home_view(request):
    """The overview: where a new team starts (upload, then ask) and where a busy one stands."""
    if request.account is None:
        return render(request, "accounts/no_account.html", {"form": AccountForm()})
    account = request.account
    documents = document_list(account=account)
    return render(
        request,
        "accounts/home.html",
        {
            "document_count": documents.count(),
            "ready_count": documents.filter(status="ready").count(),
            "recent_documents": documents[:5],
            "recent_conversations": conversation_list(account=account, user=request.user)[:5],
            "formats_in_words": FORMATS_IN_WORDS,  # from the kinds registry (documents/kinds.py)
        },
    )


def page_not_found(request, exception=None):
    if is_api_path(request.path):
        return JsonResponse(error_body("not_found", STATUS_MESSAGES[404]), status=404)
    # A view's 404 renders in the request's transaction already; an address no URL matches
    # reaches no view, so its page (whose header reads the balance) opens the context here.
    with request_account_context(request):
        return render(request, "errors/404.html", status=404)


def server_error(request):
    if is_api_path(request.path):
        return JsonResponse(error_body("server_error", STATUS_MESSAGES[500]), status=500)
    # No request context: the failed request's transaction may be unusable, and the page
    # must render without touching the database.
    return HttpResponseServerError(loader.render_to_string("errors/500.html"))
