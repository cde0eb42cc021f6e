"""GET /healthz: database, Redis and the number of live rq workers."""
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


def _redis_and_workers() -> tuple[str, int]:
    try:
        import django_rq
        from rq import Worker

        redis = django_rq.get_connection("default")
        redis.ping()
        return "ok", len(Worker.all(connection=redis))
    except Exception as exc:
        return f"error: {exc.__class__.__name__}", 0


@require_GET
def healthz(request):
    database = _database()
    redis, workers = _redis_and_workers()
    healthy = database == "ok" and redis == "ok"
    body = {"status": "ok" if healthy else "error", "database": database, "redis": redis, "workers": workers}
    return JsonResponse(body, status=200 if healthy else 503)
