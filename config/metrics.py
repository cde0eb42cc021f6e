"""GET /metrics: the Prometheus text page (core/metrics.py defines what is on it).

Answered to a scraper on this machine (loopback, and no proxy header: a reverse proxy on the
same host makes every visitor look like loopback) or to one that sends
`Authorization: Bearer <METRICS_TOKEN>`; anyone else gets 403, a wrong token 401. The page
holds counts only: no account, user or key names or ids.

A proxy header is any header a proxy or CDN adds to say whom it relays or that it relayed:
`Forwarded`, `Via`, any `X-Forwarded-*` (also `X-Original-Forwarded-For`), `X-Real-IP`, and any
`*-Client-IP` or `*-Connecting-IP` (`X-Client-IP`, `True-Client-IP`, `CF-Connecting-IP`,
`Fastly-Client-IP`, `X-Cluster-Client-IP`). Matched by shape rather than by a list of names, so
a proxy's own variant is not a way in. A local proxy that adds none of them cannot be told
from this machine: configure it to set one (nginx: `proxy_set_header X-Forwarded-For …`).
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from core import metrics
from core.sockets import open_sockets_count


def _is_proxy_header(meta_name: str) -> bool:
    """Whether a request.META key is a header a proxy adds (see the module's docstring)."""
    if not meta_name.startswith("HTTP_"):
        return False
    name = meta_name[len("HTTP_") :]
    return (
        name in ("FORWARDED", "VIA", "X_REAL_IP")
        or "FORWARDED_" in name
        or name.endswith(("_FORWARDED", "_CLIENT_IP", "_CONNECTING_IP"))
    )


def _relayed(request) -> bool:
    # Present at all counts, even empty: a proxy that sends the header blank still relayed it.
    return any(_is_proxy_header(name) for name in request.META)


def _from_loopback(request) -> bool:
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def _refusal(request) -> HttpResponse | None:
    authorization = request.headers.get("Authorization", "")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if (
            scheme.lower() == "bearer"
            and settings.METRICS_TOKEN
            and hmac.compare_digest(token.strip().encode(), settings.METRICS_TOKEN.encode())
        ):
            return None
        response = HttpResponse("That metrics token is not right.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    hint = (
        "send Authorization: Bearer <METRICS_TOKEN>"
        if settings.METRICS_TOKEN
        else "set METRICS_TOKEN and send it as Authorization: Bearer <token>"
    )
    if _relayed(request):
        return HttpResponse(
            f"This request came through a proxy (it carries a forwarding header), so it is not "
            f"this machine's own: {hint}.\n",
            status=403,
            content_type="text/plain",
        )
    if _from_loopback(request):
        return None
    return HttpResponse(
        f"Metrics are served to this machine only; from elsewhere {hint}.\n", status=403, content_type="text/plain"
    )


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
metrics.scrape_gauge(
    "groundwork_rq_jobs",
    "Jobs in the default rq queue, by state (failed: in the failed job registry, kept for its TTL).",
    ("state",),
    _rq_jobs,
)
