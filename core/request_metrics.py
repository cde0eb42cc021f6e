"""Counts and times every HTTP request by the URL pattern's name (`documents:list`), never
by its raw path: a path holds ids, and one series per document would be a series per row."""

from __future__ import annotations

import time

from core.metrics import UNRESOLVED_VIEW, http_request_observe


def view_name(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return UNRESOLVED_VIEW
    return match.view_name or match._func_path or UNRESOLVED_VIEW


class RequestMetricsMiddleware:
    """Early in MIDDLEWARE, so that refusals of the middleware after it (413, 403) count too."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        http_request_observe(
            view=view_name(request),
            method=request.method,
            status=response.status_code,
            seconds=time.perf_counter() - started,
        )
        return response
