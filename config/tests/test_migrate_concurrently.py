"""Nodes that start together migrate together: a deployment that starts three containers at
once (each running `manage.py migrate` as its release step) must end with every one of them
up and one schema, not with a node dead of `tuple concurrently updated`.

`manage.py migrate` holds a PostgreSQL advisory lock for everything it installs (the signed
context and its key, Django's migrations, the app role's grants), so concurrent runs wait for
each other and the later ones find nothing left to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings
from django.db import connections

from core.db_owner import owner_connection, owner_credentials

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
NODES = 3


def _url(role: str, name: str) -> str:
    s = connections["default"].settings_dict
    return f"postgres://{role}@{quote(str(s['HOST']), safe='')}:{s['PORT']}/{name}"


@pytest.fixture
def empty_database():
    name = f"test_concurrent_{uuid.uuid4().hex[:10]}"
    with owner_connection() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with owner_connection() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_three_nodes_migrating_at_once_all_succeed(empty_database, tmp_path):
    owner = (owner_credentials() or {"USER": settings.DATABASE_APP_USER})["USER"]
    env = {
        **os.environ,
        "DATABASE_URL": _url(settings.DATABASE_APP_USER, empty_database),
        "DATABASE_OWNER_URL": _url(owner, empty_database),
        "SECRET_KEY": settings.SECRET_KEY,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    logs = [tmp_path / f"node{i}.log" for i in range(NODES)]
    nodes = [
        subprocess.Popen(
            [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
            cwd=REPO,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        for log in logs
    ]
    try:
        codes = [node.wait(300) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    outputs = [log.read_text() for log in logs]
    assert codes == [0] * NODES, "\n\n".join(
        f"node {i}: exit {c}\n{o[-3000:]}" for i, (c, o) in enumerate(zip(codes, outputs))
    )

    # One schema, fully migrated, and the app role can use it (as after a single migrate).
    check = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--check", "--no-input"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    s = connections["default"].settings_dict
    with psycopg.connect(
        dbname=empty_database,
        host=s["HOST"],
        port=s["PORT"],
        user=settings.DATABASE_APP_USER,
        password=s["PASSWORD"] or None,
    ) as app:
        assert app.execute("SELECT count(*) FROM accounts_account").fetchone() == (0,)
        applied = app.execute(
            "SELECT app, name, count(*) FROM django_migrations GROUP BY 1, 2 HAVING count(*) > 1"
        ).fetchall()
        assert applied == [], f"migrations applied twice: {applied}"
