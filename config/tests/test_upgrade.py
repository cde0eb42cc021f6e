"""Upgrades: a database built and filled by an earlier commit of this
repository, through that commit's own `manage.py migrate` and services, then migrated to
now by this checkout's `manage.py migrate`: every row intact, RLS FORCEd on every tenant
table (the new ones too), the app role still plain, and search finds what it found.

The earlier commit is EARLIER below: the chat merge's landing (one embed ->
charge -> search per turn). Between it and now: documents 0015 (per-document language,
the full-text function replaced), 0016 (tags, replaced again), chat 0005 (feedback),
sources 0001 (a new tenant app). It runs with this checkout's venv (same Django, same
drivers); `git archive` writes its tree into a temp folder, the repository is untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings
from django.db import connections

from config.backup import Target, unforced_tenant_tables
from core.db_owner import owner_connection, owner_credentials

EARLIER = "e25443c"  # the chat merge (1b399c8) and its import fix, 2026-12-01 20:06 UTC
REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FILL = r"""
import json, django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
from django.core.files.uploadedfile import SimpleUploadedFile
from rq import SimpleWorker
import django_rq
from accounts import services as accounts
from accounts.models import User
from billing.services import credits_grant
from core.tenancy import account_context
from documents.services import document_upload

setup_test_environment()
queue = django_rq.get_queue("default")
queue.empty()
out = {}
for name, text in [("Acme", "# Holidays\n\nEveryone at Acme has twenty-eight days of paid holiday a year."
                            "\n\n# Laptops\n\nNew starters receive a laptop on day one."),
                   ("Beta", "# Rockets\n\nBeta ships the rocket in May, from the northern launch site.")]:
    owner = User.objects.create_user(email=f"owner@{name.lower()}.test", password="correct-horse-battery")
    account = accounts.account_create(name=name, owner=owner)
    with account_context(account):
        credits_grant(account=account, amount=2500, reason="annual plan")
        document_upload(account=account, actor=None,
                        upload=SimpleUploadedFile(f"{name.lower()}.md", text.encode(), content_type="text/plain"))
        _, key = accounts.api_key_create(account=account, actor=None, name="upgrade")
    worker = SimpleWorker([queue], connection=queue.connection)
    while queue.count:
        worker.work(burst=True)
    response = Client().post("/api/v1/chat/", {"message": "What does the handbook say?"},
                             content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content
    out[name] = account.pk
print("FILLED " + json.dumps(out))
"""


def _url(role: str, name: str) -> str:
    s = connections["default"].settings_dict
    return f"postgres://{role}@{quote(str(s['HOST']), safe='')}:{s['PORT']}/{name}"


# The earlier commit runs on its own code only: an editable install of this checkout puts a
# finder on sys.meta_path that would answer for a package the earlier tree lacks (a new
# `accounts/templatetags/` module, say) with this checkout's copy. Taken off first.
WITHOUT_THIS_CHECKOUT = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path "
    "if not str(getattr(f, '__module__', '')).startswith('__editable__')]\n"
)


def _earlier(args: list[str]) -> list[str]:
    """`python manage.py …` or `python -c CODE` as the earlier commit's own code."""
    if args[1] == "-c":
        return [args[0], "-c", WITHOUT_THIS_CHECKOUT + args[2], *args[3:]]
    return [
        args[0],
        "-c",
        WITHOUT_THIS_CHECKOUT + "import runpy; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')",
        *args[1:],
    ]


def _run(args: list[str], cwd: Path, env: dict) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"{args} in {cwd}:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result.stdout


def _rows(target: Target, columns: dict[str, list[str]] | None = None) -> tuple[dict, dict]:
    """Every public table's rows as text of the given (or all its) columns, sorted; and the
    columns used. Data intact = the same rows over the columns the earlier schema had."""
    with target.connect(bypass=True) as conn:
        if columns is None:
            columns = {}
            for table, column in conn.execute(
                "SELECT table_name, column_name FROM information_schema.columns"
                " WHERE table_schema = 'public' AND table_name <> 'django_migrations'"
                " ORDER BY table_name, ordinal_position"
            ).fetchall():
                columns.setdefault(table, []).append(column)
        rows = {
            table: [
                r[0]
                for r in conn.execute(
                    f'SELECT ROW({", ".join(f"{chr(34)}{c}{chr(34)}" for c in cols)})::text FROM "{table}" ORDER BY 1'
                ).fetchall()
            ]
            for table, cols in columns.items()
        }
    return rows, columns


@pytest.fixture
def on_database():
    import contextlib

    conn = connections["default"]

    def close():
        conn.close()
        if conn.settings_dict["OPTIONS"].get("pool"):
            conn.close_pool()

    @contextlib.contextmanager
    def go(name):
        saved = conn.settings_dict["NAME"]
        close()
        conn.settings_dict["NAME"] = name
        try:
            yield
        finally:
            close()
            conn.settings_dict["NAME"] = saved

    return go


def test_a_database_of_an_earlier_commit_migrates_to_now(tmp_path, fake_llm, on_database):
    if not (REPO / ".git").exists():
        pytest.skip("needs this repository's history (git archive of the earlier commit)")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    archive = tmp_path / "earlier.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", "-o", str(archive), EARLIER], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(earlier, filter="data")

    name = f"test_upgrade_{uuid.uuid4().hex[:10]}"
    with owner_connection() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        owner = (owner_credentials() or {"USER": settings.DATABASE_APP_USER})["USER"]
        redis = os.environ["REDIS_URL"].replace("db=15", "db=14")  # its own queue, away from the tests'
        env = {
            **os.environ,
            "DATABASE_URL": _url(settings.DATABASE_APP_USER, name),
            "DATABASE_OWNER_URL": _url(owner, name),
            "REDIS_URL": redis,
            "SECRET_KEY": settings.SECRET_KEY,
            "MEDIA_ROOT": str(tmp_path / "media"),
            "LLM_BASE_URL": fake_llm.base_url,
            "GROUNDWORK_BUNDLED_MODELS": "0",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PYTHONPATH": str(earlier),
            "CACHE_PREFIX": f"groundwork-upgrade-{name}",
            "CHANNELS_PREFIX": f"groundwork-upgrade-{name}",
        }
        # The earlier commit: its migrations, then its services fill two accounts.
        _run(_earlier([sys.executable, "manage.py", "migrate", "--noinput"]), earlier, env)
        filled = _run(_earlier([sys.executable, "-c", FILL]), earlier, env)
        accounts = json.loads(filled.split("FILLED ", 1)[1].splitlines()[0])
        target = Target.from_settings(name=name)
        before, columns = _rows(target)
        assert len(before["documents_chunk"]) >= 2 and len(before["chat_message"]) == 4
        assert "sources_source" not in before  # (the earlier schema indeed lacks the newer apps)

        # Now: this checkout's migrate on that database.
        _run([sys.executable, "manage.py", "migrate", "--noinput"], REPO, {**env, "PYTHONPATH": str(REPO)})
        after, _ = _rows(target, columns)
        for table in columns:
            if table in ("auth_permission", "django_content_type"):  # the new models' rows join them
                assert set(before[table]) <= set(after[table]), table
            else:
                assert after[table] == before[table], f"{table} changed in the upgrade"

        with target.connect() as conn:
            assert unforced_tenant_tables(conn) == []
            forced = {r[0] for r in conn.execute("SELECT relname FROM pg_class WHERE relforcerowsecurity")}
            assert {"sources_source", "chat_messagefeedback", "documents_chunk", "billing_creditledgerentry"} <= forced
        s = connections["default"].settings_dict
        with psycopg.connect(dbname=name, host=s["HOST"], port=s["PORT"], user=s["USER"]) as app:
            assert app.execute(
                "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
            ).fetchone() == (False, False)
            assert app.execute("SELECT count(*) FROM documents_chunk").fetchone()[0] == 0  # no context: no rows

        # Search works on the upgraded database, through this checkout's services.
        from accounts.models import Account
        from core.tenancy import account_context
        from retrieval.search.query import search_for_query

        with on_database(name):
            for account_name, query, document in [
                ("Acme", "paid holiday days", "acme.md"),
                ("Beta", "rocket launch site", "beta.md"),
            ]:
                account = Account.objects.get(pk=accounts[account_name])
                with account_context(account):
                    hits = search_for_query(account=account, query=query, key=f"upgrade:{uuid.uuid4().hex}")
                assert hits and {h.document_name for h in hits} == {document}
    finally:
        with owner_connection() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
