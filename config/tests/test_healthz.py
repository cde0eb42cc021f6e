import os


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


def test_a_supervisor_is_ready_only_once_its_own_processes_registered(settings):
    """make run says "running" once its own web processes and workers registered on Redis: on a
    Redis shared with another node, that node's processes do not make it ready."""
    import socket
    import time
    import uuid
    from types import SimpleNamespace

    import django_rq
    from rq import Worker

    from config.run import _all_registered
    from core.presence import _key

    connection = django_rq.get_connection("default")
    ours, another_node = SimpleNamespace(pid=os.getpid()), SimpleNamespace(pid=os.getpid() + 100_000)
    env = {"REDIS_URL": settings.REDIS_URL, "CACHE_PREFIX": settings.CACHES["default"]["KEY_PREFIX"]}
    worker = Worker(["default"], connection=connection, name=f"readiness-{uuid.uuid4().hex}")
    member = f"{socket.gethostname()}:{os.getpid()}"
    try:
        assert not _all_registered([ours], [ours], env)(b"{}")  # nothing of ours registered yet
        worker.register_birth()
        assert not _all_registered([ours], [ours], env)(b"{}")  # the worker, not the web process
        connection.zadd(_key(), {member: time.time() + 30})
        assert _all_registered([ours], [ours], env)(b"{}")
        assert not _all_registered([ours], [ours, another_node], env)(b"{}")
        assert not _all_registered([another_node], [ours], env)(b"{}")
    finally:
        worker.register_death()
        connection.zrem(_key(), member)
