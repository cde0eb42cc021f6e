"""GET /metrics (docs/operations/metrics.md): who may read it, and that a request, a chat turn over
the fake model server, an ingestion and a debit each move their series. In one process
(no PROMETHEUS_MULTIPROC_DIR); several processes: test_metrics_processes.py."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from accounts.tests.factories import make_api_key
from core.tenancy import account_context

HANDBOOK = (
    "# Holidays\n\nEveryone has twenty-eight days of paid holiday a year; unused days carry "
    "over until March.\n\n# Laptops\n\nNew starters get a laptop on day one."
)


def scrape(client, **extra) -> dict[tuple, float]:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return samples(response.content.decode())


def samples(text: str) -> dict[tuple, float]:
    """{(sample name, (label, value) pairs sorted): value} from the text format."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: dict, name: str, **labels) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


# --- who may read it ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_loopback_reads_the_page_without_a_token(client):
    assert ("groundwork_metrics_scrape_errors", ()) in scrape(client, REMOTE_ADDR="127.0.0.1")
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200


@pytest.mark.django_db
def test_another_address_is_refused_and_the_token_lets_it_in(client, settings):
    settings.METRICS_TOKEN = "scrape-secret"
    refused = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert refused.status_code == 403 and b"METRICS_TOKEN" in refused.content
    # Through a reverse proxy on this machine every visitor is loopback: not trusted then.
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 403
    wrong = client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer not-it")
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer not-it").status_code == 401
    assert scrape(client, REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer scrape-secret")


PROXY_HEADERS = (
    "X-Forwarded-For",
    "Forwarded",
    "X-Real-IP",
    "X-Client-IP",
    "True-Client-IP",
    "CF-Connecting-IP",
    "Fastly-Client-IP",
    "X-Cluster-Client-IP",
    "X-Forwarded-Host",
    "X-Forwarded-Proto",
    "X-Original-Forwarded-For",
    "Via",
)


@pytest.mark.django_db
@pytest.mark.parametrize("header", PROXY_HEADERS)
def test_a_request_relayed_by_a_local_proxy_needs_the_token(client, settings, header):
    """A proxy on this machine relays every visitor from loopback; whichever header it names
    the visitor (or itself) in, the request is not this machine's own: the token is required."""
    settings.METRICS_TOKEN = "scrape-secret"
    meta = {"HTTP_" + header.upper().replace("-", "_"): "203.0.113.9", "REMOTE_ADDR": "127.0.0.1"}
    refused = client.get("/metrics", **meta)
    assert refused.status_code == 403, header
    assert b"METRICS_TOKEN" in refused.content and b"proxy" in refused.content
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret", **meta).status_code == 200


@pytest.mark.django_db
def test_without_a_configured_token_no_bearer_is_accepted(client, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 403
    assert client.post("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 405


# --- what moves the series ------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_request_counts_by_url_name_not_path(client, account_a):
    key = make_api_key(account_a)
    before = scrape(client)
    assert client.get("/api/v1/documents/123456/", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 404
    assert client.get("/api/v1/documents/", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200
    assert client.get("/no/such/page/", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 404
    after = scrape(client)

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("groundwork_http_requests_total", view="api-documents", method="GET", status="200") == 1
    assert moved("groundwork_http_request_duration_seconds_count", view="api-documents") == 1
    assert moved("groundwork_http_requests_total", view="<unresolved>", method="GET", status="404") == 1
    detail = [
        k
        for k in after
        if k[0] == "groundwork_http_requests_total"
        and dict(k[1])["status"] == "404"
        and dict(k[1])["view"] != "<unresolved>"
    ]
    assert detail, "the document detail's 404 was not counted under its URL name"
    assert not any("123456" in str(k) or "/api/" in str(k) for k in after)  # no raw path, no id, anywhere


@pytest.mark.django_db
def test_ingestion_and_its_debit_move_documents_pages_tokens_and_credits(
    client, account_a, fake_llm, upload_and_ingest
):
    from documents.models import Document

    before = scrape(client)
    document = upload_and_ingest(account_a, "handbook.md", HANDBOOK.encode())
    assert document.status == "ready"
    after = scrape(client)
    assert (
        value(after, "groundwork_documents_ingested_total", outcome="ready")
        == value(before, "groundwork_documents_ingested_total", outcome="ready") + 1
    )
    embedding_credits = [
        k for k in after if k[0] == "groundwork_credits_debited_total" and dict(k[1])["kind"] == "embedding"
    ]
    assert embedding_credits
    moved = sum(after[k] - before.get(k, 0) for k in embedding_credits)
    assert moved == document.credits_charged
    tokens = sum(
        after[k] - before.get(k, 0)
        for k in after
        if k[0] == "groundwork_tokens_total" and dict(k[1])["kind"] == "embedding"
    )
    assert tokens == document.embedding_tokens
    with account_context(account_a):
        ready = Document.objects.for_account(account_a).filter(status="ready").count()
    assert value(after, "groundwork_documents", status="ready") >= ready >= 1
    assert value(after, "groundwork_ingestion_queue_depth") == 0
    assert ("groundwork_ingestion_queue_oldest_seconds", ()) in after


@pytest.mark.django_db
def test_a_pending_document_is_the_ingestion_queue(client, account_a, queue, django_capture_on_commit_callbacks):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from documents.services import document_upload

    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        document_upload(account=account_a, actor=None, upload=SimpleUploadedFile("a.txt", b"some text", "text/plain"))
    found = scrape(client)
    assert value(found, "groundwork_ingestion_queue_depth") == 1
    assert value(found, "groundwork_documents", status="pending") == 1
    assert value(found, "groundwork_rq_jobs", state="queued") >= 1


@pytest.mark.django_db
def test_a_chat_turn_counts_its_outcome_first_token_and_credits(
    client, account_a, fake_llm, upload_and_ingest, django_capture_on_commit_callbacks
):
    upload_and_ingest(account_a, "handbook.md", HANDBOOK.encode())
    fake_llm.answer = "Twenty-eight days [Document 1]."
    key = make_api_key(account_a)
    before = scrape(client)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/api/v1/chat/",
            {"message": "How much holiday do we get?"},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )
    assert response.status_code == 200, response.content
    usage = response.json()["usage"]
    after = scrape(client)
    assert (
        value(after, "groundwork_chat_turns_total", surface="api", outcome="done")
        == value(before, "groundwork_chat_turns_total", surface="api", outcome="done") + 1
    )
    for name in ("groundwork_chat_time_to_first_token_seconds_count", "groundwork_chat_turn_duration_seconds_count"):
        assert value(after, name, surface="api") == value(before, name, surface="api") + 1
    chat_tokens = sum(
        after[k] - before.get(k, 0) for k in after if k[0] == "groundwork_tokens_total" and dict(k[1])["kind"] == "chat"
    )
    assert chat_tokens == usage["prompt_tokens"] + usage["completion_tokens"]
    chat_credits = sum(
        after[k] - before.get(k, 0)
        for k in after
        if k[0] == "groundwork_credits_debited_total" and dict(k[1])["kind"] == "chat"
    )
    assert chat_credits > 0


@pytest.mark.django_db
def test_a_refused_turn_counts_its_error_code(client, account_a, fake_llm):
    from billing.selectors import balance_get
    from billing.services import credits_debit

    key = make_api_key(account_a)
    with account_context(account_a):
        credits_debit(account=account_a, tokens=balance_get(account=account_a), key="drain", kind="chat")
    before = scrape(client)
    response = client.post(
        "/api/v1/chat/",
        {"message": "What is our policy?"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 402
    code = response.json()["error"]["code"]
    after = scrape(client)
    assert (
        value(after, "groundwork_chat_turns_total", surface="api", outcome=code)
        == value(before, "groundwork_chat_turns_total", surface="api", outcome=code) + 1
    )


@pytest.mark.django_db
def test_the_page_names_no_account(client, account_a, account_b, fake_llm, upload_and_ingest):
    upload_and_ingest(account_a, "handbook.md", HANDBOOK.encode())
    text = client.get("/metrics").content.decode()
    found = samples(text)
    # Every label value but the status (an account's id may be 413 after enough tests on one
    # database; a status 413 is not that account).
    values = {value for _, pairs in found for name, value in pairs if name != "status"}
    for account in (account_a, account_b):
        assert str(account.pk) not in values and account.name not in text
    labels = {name for _, pairs in found for name, _ in pairs}
    assert labels and not any(word in name for name in labels for word in ("account", "user", "key", "tenant"))


# --- request ids ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_request_id_comes_back_and_is_made_when_missing_or_unsafe(client):
    assert client.get("/healthz", HTTP_X_REQUEST_ID="abc-123").headers["X-Request-ID"] == "abc-123"
    made = client.get("/healthz").headers["X-Request-ID"]
    assert len(made) == 32
    unsafe = client.get("/healthz", HTTP_X_REQUEST_ID='x" injected=1').headers["X-Request-ID"]
    assert unsafe != 'x" injected=1' and len(unsafe) == 32


@pytest.mark.django_db(transaction=True)  # the upload's on-commit enqueue runs inside the request, as served
def test_a_job_enqueued_during_a_request_keeps_its_id_and_logs_it_as_json(client, account_a, queue, run_jobs, fake_llm):
    import io

    from config.logs import JsonFormatter
    from core.request_id import RequestIdFilter

    key = make_api_key(account_a)
    response = client.post(
        "/api/v1/documents/",
        {"file": _file("notes.txt", b"Quarterly notes.")},
        HTTP_AUTHORIZATION=f"Bearer {key}",
        HTTP_X_REQUEST_ID="upload-42",
    )
    assert response.status_code == 202, response.content
    [job] = queue.get_jobs()
    assert job.meta["request_id"] == "upload-42"

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RequestIdFilter())
    documents_logger = logging.getLogger("groundwork.documents")
    documents_logger.addHandler(handler)
    try:
        run_jobs()
    finally:
        documents_logger.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    claimed = [line for line in lines if line["message"].startswith("claimed document")]
    assert claimed and claimed[0]["request_id"] == "upload-42", lines
    assert set(claimed[0]) == {"time", "level", "logger", "message", "request_id"}


def _file(name: str, data: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data, content_type="text/plain")


@pytest.mark.django_db
def test_a_gauge_that_cannot_be_read_is_left_out_and_counted(client):
    from core import metrics

    def unreadable():
        raise ConnectionError("Redis is down")
        yield  # a generator, like the real readers

    metrics.scrape_gauge("groundwork_test_unreadable", "A gauge whose source is down.", (), unreadable)
    try:
        found = scrape(client)
    finally:
        metrics._gauges.pop("groundwork_test_unreadable")
    assert value(found, "groundwork_metrics_scrape_errors") == 1
    assert not any(k[0] == "groundwork_test_unreadable" for k in found)
    assert ("groundwork_documents", (("status", "ready"),)) in found


def test_the_supervisors_metrics_folder_is_emptied_at_start_and_kept_by_a_worker_supervisor(tmp_path):
    from config.run import metrics_dir

    folder = tmp_path / "prometheus"
    folder.mkdir()
    (folder / "counter_123.db").write_bytes(b"stale")
    env = {"PROMETHEUS_MULTIPROC_DIR": str(folder)}
    assert metrics_dir(env, "serve", clean=False) == str(folder) and (folder / "counter_123.db").exists()
    assert metrics_dir(env, "serve") == str(folder) and folder.is_dir() and not list(folder.iterdir())
    env = {}
    made = metrics_dir(env, "run-8123")  # no folder set: one of this install's data dir
    try:
        assert env["PROMETHEUS_MULTIPROC_DIR"] == made and made.endswith("prometheus/run-8123")
    finally:
        import shutil

        shutil.rmtree(made)
