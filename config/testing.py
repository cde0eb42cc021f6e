"""For tests that start real processes: daphne serving config.asgi on the test database, the
way `make run` serves the app (pytest-django's live_server is WSGI only); an S3-compatible
server; an installation of its own (`make run` on a data folder of its own, from a migrated
template)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection

from config.embedded import BASE_DIR


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def daphne_on_test_database(log_dir: Path, **env_extra):
    """Start daphne on a free port against the current test database and Redis; yield
    (process, port) once GET /login/ answers 200; stop it afterwards. `env_extra` adds
    environment (e.g. LLM_BASE_URL)."""
    port = free_port()
    log = log_dir / "daphne.log"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(
        DATABASE_URL=settings.DATABASE_URL.rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"],
        REDIS_URL=settings.REDIS_URL,
        GROUNDWORK_TESTING="1",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        PYTHONUNBUFFERED="1",
        **env_extra,
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
        cwd=BASE_DIR,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"daphne exited:\n{log.read_text()[-4000:]}"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                    sock.sendall(b"GET /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    if sock.recv(64).startswith(b"HTTP/1.1 200"):
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"daphne did not answer:\n{log.read_text()[-4000:]}"
            time.sleep(0.2)
        yield process, port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


S3_KEY_ID, S3_SECRET = "groundwork-test", "groundwork-test-secret"


@contextmanager
def s3_server(bucket: str = "groundwork-test"):
    """An S3-compatible server (moto's server mode, real HTTP on a free loopback port) with
    one empty bucket; yields the settings a process needs to store its files there
    (STORAGE_BUCKET, STORAGE_ENDPOINT_URL, ...). Stopped afterwards, also on failure."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        env = {
            "STORAGE_BUCKET": bucket,
            "STORAGE_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "STORAGE_REGION": "us-east-1",
            "STORAGE_ACCESS_KEY_ID": S3_KEY_ID,
            "STORAGE_SECRET_ACCESS_KEY": S3_SECRET,
        }
        s3_client(env).create_bucket(Bucket=bucket)
        yield env
    finally:
        server.stop()


def s3_client(env: dict):
    """A boto3 client on the bucket's server, to look at what the app stored."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=env["STORAGE_ENDPOINT_URL"],
        region_name=env["STORAGE_REGION"],
        aws_access_key_id=env["STORAGE_ACCESS_KEY_ID"],
        aws_secret_access_key=env["STORAGE_SECRET_ACCESS_KEY"],
    )


def s3_keys(env: dict, prefix: str = "") -> list[str]:
    listed = s3_client(env).list_objects_v2(Bucket=env["STORAGE_BUCKET"], Prefix=prefix)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def s3_storages(env: dict) -> dict:
    """settings.STORAGES as config/settings.py builds it for these bucket settings."""
    from django.conf import settings as django_settings

    return dict(
        django_settings.STORAGES,
        default={
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": env["STORAGE_BUCKET"],
                "endpoint_url": env["STORAGE_ENDPOINT_URL"],
                "region_name": env["STORAGE_REGION"],
                "access_key": env["STORAGE_ACCESS_KEY_ID"],
                "secret_key": env["STORAGE_SECRET_ACCESS_KEY"],
                "default_acl": None,
                "querystring_auth": True,
                "file_overwrite": False,
            },
        },
    )


# What the test run configured for itself; an installation a test starts finds its own, as
# `make run` on a fresh machine does.
TEST_RUN_ENVIRONMENT = (
    "DATABASE_URL",
    "DATABASE_OWNER_URL",
    "GROUNDWORK_TESTING",
    "GROUNDWORK_LOCAL",
    "LOCAL_LLM_PORT",
    "REDIS_URL",
    "CHANNELS_PREFIX",
    "CACHE_PREFIX",
    "MEDIA_ROOT",
    "LLM_BASE_URL",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "PROMETHEUS_MULTIPROC_DIR",
    "PYTEST_XDIST_WORKER",
)


def installation_env(data_dir: Path, **extra) -> dict:
    """The environment of `make run` (or `manage.py`) on its own data folder `data_dir`: this
    process's, without what the test run set up for itself, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in TEST_RUN_ENVIRONMENT}
    env.update(GROUNDWORK_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1", **{k: str(v) for k, v in extra.items()})
    return env


def template_folder() -> Path:
    """Where this test run keeps its migrated data folder (one for all its xdist workers; the
    run removes it at the end: config/pytest_embedded.py)."""
    return Path(os.environ["GROUNDWORK_TEST_TEMPLATE"])


def migrated_data_folder(data_dir: Path) -> Path:
    """`data_dir` made as a fresh `make run` leaves it after `migrate`: the embedded PostgreSQL
    initialised, the database migrated (and its secret key), everything stopped. The first
    call of the run builds a template with `manage.py migrate` (initdb and every migration,
    ~30 s); every call copies it (~1 s), with its owners (the embedded PostgreSQL runs as a
    user of its own when the tests run as root)."""
    import fcntl

    template = template_folder()
    template.mkdir(mode=0o755, parents=True, exist_ok=True)
    with (template / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one xdist worker builds it; the others wait for it
        built = template / "data"
        if not (template / "ready").exists():
            shutil.rmtree(built, ignore_errors=True)
            result = subprocess.run(
                [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
                cwd=BASE_DIR,
                env=installation_env(built),
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert result.returncode == 0, f"the template data folder did not migrate:\n{result.stderr[-4000:]}"
            shutil.rmtree(built / "redis", ignore_errors=True)  # Redis starts empty, as on a fresh machine
            (template / "ready").touch()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(built), str(data_dir)], check=True)
    return data_dir


def forget_dead_workers() -> None:
    """Unregister the rq workers of the tests' Redis database whose process is gone. A worker a
    test killed stays registered until its key expires (minutes), and a later test that counts
    the live workers (/healthz) must not count it."""
    import django_rq
    import psutil
    from rq import Worker

    for worker in Worker.all(connection=django_rq.get_connection("default")):
        if not worker.pid or not psutil.pid_exists(worker.pid):
            worker.register_death()


def forget_dead_web_processes() -> None:
    """Drop the presence entries (core/presence.py) of this machine's web processes that are gone:
    one killed outright stays counted until its entry expires (30 s)."""
    import socket

    import psutil

    from core.presence import _key, _redis

    host = socket.gethostname()
    for member in _redis().zrange(_key(), 0, -1):
        name, _, pid = member.decode().rpartition(":")
        if name == host and pid.isdigit() and not psutil.pid_exists(int(pid)):
            _redis().zrem(_key(), member)


def already_running() -> tuple[int, int]:
    """(workers, web processes) alive on the tests' Redis database before a test starts its own:
    /healthz counts those too (the suite's shared daphne, another module's worker). The dead are
    forgotten first, so the counts do not fall while the test waits."""
    import django_rq
    from rq import Worker

    from core.presence import live_web_processes

    forget_dead_workers()
    forget_dead_web_processes()
    return len(Worker.all(connection=django_rq.get_connection("default"))), live_web_processes()


def multipart_file(name: str, data: bytes, content_type: str) -> tuple[bytes, str]:
    """(body, Content-Type header) of a multipart/form-data upload with one `file` field, as a
    browser or curl sends it to POST /api/v1/documents/."""
    import uuid

    boundary = f"----groundwork-{uuid.uuid4().hex}"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        f"Content-Type: {content_type}\r\n\r\n"
    )
    return head.encode() + data + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"
