"""Error pages: JSON under /api/ and /v1/, friendly HTML elsewhere."""
from django.http import HttpResponseServerError, JsonResponse
from django.template import loader
from django.shortcuts import render

from core.api import STATUS_MESSAGES
from core.errors import error_body
from core.middleware import is_api_path


def page_not_found(request, exception=None):
    if is_api_path(request.path):
        return JsonResponse(error_body("not_found", STATUS_MESSAGES[404]), status=404)
    return render(request, "errors/404.html", status=404)


def server_error(request):
    if is_api_path(request.path):
        return JsonResponse(error_body("server_error", STATUS_MESSAGES[500]), status=500)
    # No request context: the failed request's transaction may be unusable, and the page
    # must render without touching the database.
    return HttpResponseServerError(loader.render_to_string("errors/500.html"))
