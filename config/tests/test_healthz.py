def test_healthz_reports_database_redis_and_workers(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["database"] == "ok" and body["redis"] == "ok"
    assert isinstance(body["workers"], int)
    assert "web_processes" not in body  # reported only when more than one serves (CONTRACT)


def test_healthz_names_the_failing_part(client, db, settings):
    settings.RQ_QUEUES = {"default": {"URL": "redis://127.0.0.1:1/0"}}
    import django_rq.queues

    django_rq.queues.get_redis_connection.cache_clear() if hasattr(
        django_rq.queues.get_redis_connection, "cache_clear"
    ) else None
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["database"] == "ok" and body["redis"].startswith("error")
