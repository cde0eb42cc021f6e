"""GET /healthz: database, Redis, the number of live rq workers and (when more than one
serves) of web processes."""

from __future__ import annotations

from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # any failure is reported, never raised
        return f"error: {exc.__class__.__name__}"


def _redis_workers_and_web() -> tuple[str, int, int]:
    try:
        import django_rq
        from rq import Worker

        from core.presence import live_web_processes

        redis = django_rq.get_connection("default")
        redis.ping()
        return "ok", len(Worker.all(connection=redis)), live_web_processes()
    except Exception as exc:
        return f"error: {exc.__class__.__name__}", 0, 0


@require_GET
def healthz(request):
    database = _database()
    redis, workers, web_processes = _redis_workers_and_web()
    healthy = database == "ok" and redis == "ok"
    body = {"status": "ok" if healthy else "error", "database": database, "redis": redis, "workers": workers}
    if web_processes > 1:  # CONTRACT: reported when more than one serves
        body["web_processes"] = web_processes
    return JsonResponse(body, status=200 if healthy else 503)
