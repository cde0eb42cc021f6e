"""`tags` / `exclude_tags` and the account's excluded tags on every surface that retrieves:
`POST search/`, REST chat (JSON and SSE), the websocket's chat.message,
/v1 (the OpenAI SDK's `extra_body`), the summary route and TurnRun's own keywords (MCP's
ask). Real pipeline, real database and Redis, the fake model server on loopback recording
what the model was sent."""

import json

import openai
import pytest

from accounts.tests.factories import make_api_key
from billing.models import CreditLedgerEntry
from chat.driver import TurnRun
from chat.tests.test_websocket import Socket
from core.tenancy import account_context
from documents.tags import document_tags_set, retrieval_exclude_tags_set

HOLIDAYS = "Holiday policy: everyone has twenty-eight days of paid holiday a year, approved by the team lead."
SECRET = "Holiday policy draft: the board considers thirty days of paid holiday a year for directors only."
PLAIN = "Holiday policy notes: paid holiday requests go through the holiday calendar two weeks ahead."
QUESTION = "What is the paid holiday policy?"


@pytest.fixture
def shelf(account_a, ingest_text):
    documents = {
        "hr.md": ingest_text(account_a, "hr.md", HOLIDAYS),
        "secret.md": ingest_text(account_a, "secret.md", SECRET),
        "plain.md": ingest_text(account_a, "plain.md", PLAIN),
    }
    with account_context(account_a):
        document_tags_set(account=account_a, actor=None, document=documents["hr.md"], tags=["HR"])
        document_tags_set(account=account_a, actor=None, document=documents["secret.md"], tags=["Confidential"])
    return documents


def _exclude(account, tags):
    with account_context(account):
        retrieval_exclude_tags_set(account=account, actor=None, exclude_tags=tags)


def _auth(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def _read_by_model(fake_llm) -> set[str]:
    """The documents whose chunks the model was last sent."""
    body = fake_llm.requests_to("/v1/chat/completions")[-1]
    text = body["messages"][-1]["content"]
    return {name for name in ("hr.md", "secret.md", "plain.md") if f'document="{name}"' in text}


# --- POST search/ ---------------------------------------------------------------------------


def test_search_api_tags_and_exclude_tags(client, account_a, shelf, fake_llm):
    headers = _auth(make_api_key(account_a))

    def names(**body):
        response = client.post(
            "/api/v1/search/", {"query": QUESTION, "top_k": 10, **body}, content_type="application/json", **headers
        )
        assert response.status_code == 200, response.content
        return {r["document_name"] for r in response.json()["results"]}

    assert names() == {"hr.md", "secret.md", "plain.md"}
    assert names(tags=["hr"]) == {"hr.md"}
    assert names(tags=["hr", "confidential"], exclude_tags=["HR"]) == {"secret.md"}
    assert names(exclude_tags=["confidential"]) == {"hr.md", "plain.md"}
    _exclude(account_a, ["confidential"])
    assert names() == {"hr.md", "plain.md"}
    assert names(tags=["confidential"]) == set()
    assert names(explain=True) == {"hr.md", "plain.md"}


@pytest.mark.parametrize(
    "body",
    [
        {"tags": "hr"},
        {"tags": [""]},
        {"exclude_tags": ["x" * 41]},
        {"tags": [1]},
        {"exclude_tags": [f"t{i}" for i in range(21)]},
    ],
)
def test_search_api_refuses_bad_tags_before_charging(client, account_a, fake_llm, body):
    response = client.post(
        "/api/v1/search/",
        {"query": QUESTION, **body},
        content_type="application/json",
        **_auth(make_api_key(account_a)),
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_tags"
    with account_context(account_a):
        assert not CreditLedgerEntry.objects.for_account(account_a).filter(reference="search").exists()


# --- REST chat ------------------------------------------------------------------------------


def test_rest_chat_tags_exclude_tags_and_the_account_setting(client, account_a, shelf, fake_llm):
    headers = _auth(make_api_key(account_a))

    def ask(**body):
        response = client.post(
            "/api/v1/chat/", {"message": QUESTION, **body}, content_type="application/json", **headers
        )
        assert response.status_code == 200, response.content
        return _read_by_model(fake_llm)

    assert ask() == {"hr.md", "secret.md", "plain.md"}
    assert ask(tags=["HR"]) == {"hr.md"}
    assert ask(exclude_tags=["confidential"]) == {"hr.md", "plain.md"}
    _exclude(account_a, ["Confidential"])
    assert ask() == {"hr.md", "plain.md"}
    assert "secret.md" not in ask(tags=["confidential", "hr"])


def test_rest_chat_refuses_bad_tags_with_nothing_held(client, account_a, shelf, fake_llm):
    response = client.post(
        "/api/v1/chat/",
        {"message": QUESTION, "tags": ["a,b"]},
        content_type="application/json",
        **_auth(make_api_key(account_a)),
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_tags"
    with account_context(account_a):
        assert not CreditLedgerEntry.objects.for_account(account_a).filter(reference__startswith="conv").exists()


@pytest.mark.django_db(transaction=True)  # the turn streams from a worker thread with its own connection
def test_rest_chat_stream_sources_respect_the_tags(client, account_a, shelf, fake_llm):
    _exclude(account_a, ["hr"])
    response = client.post(
        "/api/v1/chat/?stream=1",
        {"message": QUESTION, "exclude_tags": ["confidential"]},
        content_type="application/json",
        **_auth(make_api_key(account_a)),
    )
    events = [json.loads(line[6:]) for line in b"".join(response.streaming_content).decode().split("\n\n") if line]
    assert events[0]["type"] == "chat.sources" and events[-1]["type"] == "chat.done"
    assert {s["document_name"] for s in events[0]["sources"]} == {"plain.md"}


# --- the websocket ----------------------------------------------------------------------------


def _socket(account):
    socket = Socket([(b"authorization", f"Bearer {make_api_key(account)}".encode())])
    assert socket.connect()[0]
    return socket


@pytest.mark.django_db(transaction=True)
def test_websocket_chat_message_tags_and_the_account_setting(account_a, shelf, fake_llm):
    socket = _socket(account_a)
    frames = socket.ask(QUESTION, tags=["hr", "Confidential"])
    assert {s["document_name"] for s in frames[0]["sources"]} == {"hr.md", "secret.md"}
    frames = socket.ask(QUESTION, exclude_tags=["hr"])
    assert {s["document_name"] for s in frames[0]["sources"]} == {"secret.md", "plain.md"}
    _exclude(account_a, ["confidential"])
    frames = socket.ask(QUESTION)
    assert {s["document_name"] for s in frames[0]["sources"]} == {"hr.md", "plain.md"}
    assert _read_by_model(fake_llm) == {"hr.md", "plain.md"}
    error = socket.ask(QUESTION, tags="hr")[-1]
    assert error["type"] == "chat.error" and error["code"] == "invalid_tags"
    assert socket.ask(QUESTION)[-1]["type"] == "chat.done"  # the socket stays open
    socket.close()


# --- /v1 ----------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_openai_endpoint_takes_tags_in_the_body(live_server, account_a, shelf, fake_llm):
    sdk = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=make_api_key(account_a), max_retries=0)
    question = [{"role": "user", "content": QUESTION}]
    sdk.chat.completions.create(model="groundwork", messages=question, extra_body={"tags": ["hr"]})
    assert _read_by_model(fake_llm) == {"hr.md"}
    _exclude(account_a, ["hr"])
    sdk.chat.completions.create(model="groundwork", messages=question)
    assert _read_by_model(fake_llm) == {"secret.md", "plain.md"}
    sdk.chat.completions.create(model="groundwork", messages=question, extra_body={"exclude_tags": ["confidential"]})
    assert _read_by_model(fake_llm) == {"plain.md"}
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(model="groundwork", messages=question, extra_body={"tags": [""]})


# --- TurnRun's keywords (MCP's ask) and summaries --------------------------------------------------


def test_turn_run_takes_tags_and_exclude_tags(account_a, shelf, fake_llm):
    done = TurnRun(
        account=account_a, question=QUESTION, tags=["hr", "confidential"], exclude_tags=["confidential"]
    ).run()
    assert done["message_id"] and _read_by_model(fake_llm) == {"hr.md"}


def test_a_summary_of_an_excluded_document_does_not_read_it(account_a, shelf, fake_llm):
    TurnRun(account=account_a, question="Summarize secret.md").run()
    assert "secret.md" in _read_by_model(fake_llm)
    _exclude(account_a, ["confidential"])
    TurnRun(account=account_a, question="Summarize secret.md").run()
    assert "secret.md" not in _read_by_model(fake_llm)
    TurnRun(account=account_a, question="Summarize hr.md", exclude_tags=["HR"]).run()
    assert "hr.md" not in _read_by_model(fake_llm)
