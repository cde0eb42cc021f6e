"""For tests that need the real ASGI server: daphne serving config.asgi on the test
database, the way `make run` serves the app (pytest-django's live_server is WSGI only)."""
from __future__ import annotations

import os
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
    env.update(DATABASE_URL=settings.DATABASE_URL.rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"],
               REDIS_URL=settings.REDIS_URL, GROUNDWORK_TESTING="1", ALLOWED_HOSTS="127.0.0.1,localhost",
               PYTHONUNBUFFERED="1", **env_extra)
    process = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                "config.asgi:application"], cwd=BASE_DIR, env=env, stdout=log.open("w"),
                               stderr=subprocess.STDOUT)
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
        env = {"STORAGE_BUCKET": bucket, "STORAGE_ENDPOINT_URL": f"http://127.0.0.1:{port}",
               "STORAGE_REGION": "us-east-1", "STORAGE_ACCESS_KEY_ID": S3_KEY_ID,
               "STORAGE_SECRET_ACCESS_KEY": S3_SECRET}
        s3_client(env).create_bucket(Bucket=bucket)
        yield env
    finally:
        server.stop()


def s3_client(env: dict):
    """A boto3 client on the bucket's server, to look at what the app stored."""
    import boto3

    return boto3.client("s3", endpoint_url=env["STORAGE_ENDPOINT_URL"], region_name=env["STORAGE_REGION"],
                        aws_access_key_id=env["STORAGE_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["STORAGE_SECRET_ACCESS_KEY"])


def s3_keys(env: dict, prefix: str = "") -> list[str]:
    listed = s3_client(env).list_objects_v2(Bucket=env["STORAGE_BUCKET"], Prefix=prefix)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def s3_storages(env: dict) -> dict:
    """settings.STORAGES as config/settings.py builds it for these bucket settings."""
    from django.conf import settings as django_settings

    return dict(django_settings.STORAGES, default={
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {"bucket_name": env["STORAGE_BUCKET"], "endpoint_url": env["STORAGE_ENDPOINT_URL"],
                    "region_name": env["STORAGE_REGION"], "access_key": env["STORAGE_ACCESS_KEY_ID"],
                    "secret_key": env["STORAGE_SECRET_ACCESS_KEY"], "default_acl": None,
                    "querystring_auth": True, "file_overwrite": False}})
