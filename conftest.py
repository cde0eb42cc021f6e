"""Project-wide fixtures. The database is the real PostgreSQL (app role, RLS on); model
calls go to a real OpenAI-compatible HTTP server on loopback."""

import django_rq
import pytest
from rq import SimpleWorker

from accounts.tests.factories import make_account
from config.testing import forget_dead_workers
from core.db_owner import login_as_owner

_back_to_app = []


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings):
    """The test database is made, migrated and dropped by the schema's owner role, as
    `manage.py migrate` does in production (core/db_owner.py); tests run as the app's role."""
    _back_to_app.append(login_as_owner())
    _drop_test_database_made_by_the_app_role()


def _drop_test_database_made_by_the_app_role():
    """A kept test database from before the owner role (its tables owned by the app's role)
    cannot be migrated by the owner: make it anew."""
    import psycopg
    from django.db import connections

    s = connections["default"].settings_dict
    name = s["TEST"]["NAME"]
    login = dict(host=s["HOST"] or None, port=s["PORT"] or None, user=s["USER"], password=s["PASSWORD"] or None)
    try:
        with psycopg.connect(dbname=name, **login) as conn:
            row = conn.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'django_migrations'").fetchone()
    except psycopg.OperationalError:
        return  # no such database yet
    if row and row[0] != s["USER"]:
        with psycopg.connect(dbname="postgres", autocommit=True, **login) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    _back_to_app.pop()()
    yield
    login_as_owner()  # pytest-django drops the test database next


@pytest.fixture(autouse=True)
def _fresh_attempt_counts():
    """Login, sign-up, reset and invitation limits count per IP and per address in Redis, and
    every test client is 127.0.0.1: each test starts from zero (accounts.ratelimit)."""
    from accounts import ratelimit

    ratelimit.reset_all()
    yield


@pytest.fixture
def account_a(db):
    return make_account("Acme", owner_email="owner@acme.test")


@pytest.fixture
def account_b(db):
    return make_account("Beta", owner_email="owner@beta.test")


@pytest.fixture
def owner_a(account_a):
    return account_a.test_owner


@pytest.fixture
def owner_b(account_b):
    return account_b.test_owner


@pytest.fixture
def client_a(client, owner_a):
    client.force_login(owner_a)
    return client


@pytest.fixture
def fake_llm(settings):
    """A deterministic OpenAI-compatible server on loopback, wired in as the provider."""
    from llm.fake_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        settings.LLM_BASE_URL, settings.LLM_BUNDLED = server.base_url, False
        yield server


@pytest.fixture(scope="module")
def model_server():
    """One fake model server for a whole module: for a module that starts a server of its own
    (daphne) pointed at it, and overrides `fake_llm` to reset and wire in this one per test."""
    from llm.fake_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="session")
def session_model_server():
    """The fake model server that `session_daphne` answers with (a test resets it first)."""
    from llm.fake_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="session")
def session_daphne(django_db_setup, django_db_blocker, session_model_server, tmp_path_factory):
    """(process, port) of one daphne serving config.asgi on the test database, with the default
    settings and `session_model_server` as its model provider: for every module that drives the
    app over real HTTP and needs no settings of its own (those start their own:
    config.testing.daphne_on_test_database). It serves requests only; it runs no jobs."""
    from config.testing import daphne_on_test_database

    with (
        django_db_blocker.unblock(),
        daphne_on_test_database(
            tmp_path_factory.mktemp("daphne"), LLM_BASE_URL=session_model_server.base_url
        ) as started,
    ):
        yield started


@pytest.fixture
def queue():
    """The real rq queue (the tests' own Redis database), emptied before and after."""
    q = django_rq.get_queue("default")

    def clean():
        q.empty()
        # (Scheduled: retries that a test's failing job left behind, which the sweeper counts.)
        for registry in (q.failed_job_registry, q.finished_job_registry, q.scheduled_job_registry):
            for job_id in registry.get_job_ids():
                try:
                    registry.remove(job_id, delete_job=True)
                except ValueError:  # rq: the job's execution record is gone already (it expires)
                    registry.remove(job_id)
        forget_dead_workers()

    clean()
    yield q
    clean()


@pytest.fixture
def run_jobs(queue, django_capture_on_commit_callbacks):
    """Run everything queued, in this process and transaction (rq's SimpleWorker, burst).

    The jobs' own on-commit hooks (enqueueing, file removal) fire as they would after a
    real commit. Returns the number of jobs run; a failed job fails the test with its
    traceback.
    """

    def run() -> int:
        worker = SimpleWorker([queue], connection=queue.connection)
        failed_before = set(queue.failed_job_registry.get_job_ids())
        count = 0
        while queue.count:
            count += queue.count
            with django_capture_on_commit_callbacks(execute=True):
                worker.work(burst=True)
        failed = set(queue.failed_job_registry.get_job_ids()) - failed_before
        assert not failed, [queue.fetch_job(j).exc_info for j in failed]
        return count

    return run


@pytest.fixture
def upload_and_ingest(run_jobs, django_capture_on_commit_callbacks):
    """Upload a file into an account as the API does, run the queue, return the document
    as stored. Uses whatever model server the test wired in (fake_llm, or the local one)."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from core.tenancy import account_context
    from documents.models import Document
    from documents.services import document_upload

    def go(account, name, data: bytes, content_type="text/plain"):
        with account_context(account), django_capture_on_commit_callbacks(execute=True):
            document, _ = document_upload(
                account=account, actor=None, upload=SimpleUploadedFile(name, data, content_type=content_type)
            )
        run_jobs()
        with account_context(account):
            return Document.objects.for_account(account).get(pk=document.pk)

    return go
