"""JSON errors for every /api/ and /v1/ response, including the ones DRF never sees
(unrouted 404s, 405s from plain views, unexpected exceptions, 413 from the request parser)."""

from __future__ import annotations

import logging

from django.http import JsonResponse

from core.api import API_PREFIXES, STATUS_CODES, STATUS_MESSAGES, exception_handler
from core.errors import error_body

logger = logging.getLogger("groundwork.api")


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES)


class JsonErrorMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not is_api_path(request.path) or response.status_code < 400:
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        status = response.status_code
        message = STATUS_MESSAGES.get(status, response.reason_phrase or "Request failed.")
        replacement = JsonResponse(error_body(STATUS_CODES.get(status, "error"), message), status=status)
        for header in ("Allow", "WWW-Authenticate", "Retry-After"):
            if header in response:
                replacement[header] = response[header]
        return replacement

    def process_exception(self, request, exception):
        return api_error_response(request, exception)


def api_error_response(request, exception) -> JsonResponse | None:
    """An exception that escaped a view under /api/ or /v1/, as the contract's JSON error;
    None elsewhere (the page's error handlers answer)."""
    if not is_api_path(request.path):
        return None
    response = exception_handler(exception, {"request": request})
    response.accepted_renderer = None
    return JsonResponse(response.data, status=response.status_code)
