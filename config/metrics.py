"""GET /metrics: the Prometheus text page (core/metrics.py defines what is on it).

Answered to a scraper on this machine (loopback, and no proxy header: a reverse proxy on the
same host makes every visitor look like loopback) or to one that sends
`Authorization: Bearer <METRICS_TOKEN>`; anyone else gets 403, a wrong token 401. The page
holds counts only: no account, user or key names or ids.
"""
from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from core import metrics
from core.sockets import open_sockets_count

_PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def _from_loopback(request) -> bool:
    if any(request.META.get(header) for header in _PROXY_HEADERS):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def _refusal(request) -> HttpResponse | None:
    authorization = request.headers.get("Authorization", "")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and settings.METRICS_TOKEN and \
                hmac.compare_digest(token.strip().encode(), settings.METRICS_TOKEN.encode()):
            return None
        response = HttpResponse("That metrics token is not right.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if _from_loopback(request):
        return None
    hint = ("send Authorization: Bearer <METRICS_TOKEN>" if settings.METRICS_TOKEN
            else "set METRICS_TOKEN and send it as Authorization: Bearer <token>")
    return HttpResponse(f"Metrics are served to this machine only; from elsewhere {hint}.\n", status=403,
                        content_type="text/plain")


@require_GET
def metrics_view(request):
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    body, content_type = metrics.exposition()
    return HttpResponse(body, content_type=content_type)


def _open_websockets():
    yield (), open_sockets_count()


def _rq_jobs():
    import django_rq

    queue = django_rq.get_queue("default")
    yield ("queued",), queue.count
    yield ("failed",), queue.failed_job_registry.count
    yield ("scheduled",), queue.scheduled_job_registry.count


metrics.scrape_gauge("groundwork_open_websockets", "Open websockets across every web process.", (), _open_websockets)
metrics.scrape_gauge("groundwork_rq_jobs", "Jobs in the default rq queue, by state (failed: in the failed "
                     "job registry, kept for its TTL).", ("state",), _rq_jobs)
