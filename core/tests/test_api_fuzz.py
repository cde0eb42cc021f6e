"""Every operation of the OpenAPI schema (`/api/schema/`), fuzzed with schemathesis against the
real server (daphne on loopback, as `make run` serves it, on the test database) with two
accounts' API keys:

- no operation answers a 5xx, whoever asks and whatever is sent (a few examples an operation,
  positive and negative; every 5xx found is listed with the request that caused it);
- account B's key never reads account A's objects: A is seeded with a document, a collection,
  a conversation with its messages, a feedback, a source and an export, and each operation
  that takes an id is called by B with A's ids (404, or 403 where a key may not at all), and
  nothing B is answered, in any operation, holds A's words.

The WSGI walk of the schema in process (config/tests/test_schemathesis.py) checks the error
shape; this one checks the served stack and tenant isolation."""

from __future__ import annotations

import pytest
import requests
import schemathesis
from django.core.files.uploadedfile import SimpleUploadedFile
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from accounts.keys import hash_key
from accounts.models import ApiKey
from accounts.tests.factories import make_api_key
from chat.models import MessageFeedback
from chat.tests.test_feedback import _turns
from config.testing import daphne_on_test_database
from core.tenancy import account_context, user_context
from documents.services import collection_create, document_upload
from exports.models import DataExport, ExportStatus
from sources.models import Source

pytestmark = [
    pytest.mark.system,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]  # daphne reads what the test writes

# In every object of account A: a word no answer to account B may hold.
MARKER = "Quetzalcoatlus"
EXAMPLES = 3  # an operation, a mode, a key: bounded, so the whole module runs in about a minute
# A body the service accepts, for operations that check the body before they look the id up (a
# bad title is a 400 whatever the id): with it, one example of each surely reaches the lookup.
ACCEPTED_BODIES = {
    "PATCH /api/v1/conversations/{conversation_id}/": {"title": "Renamed"},
    "PATCH /api/v1/documents/{document_id}/": {"tags": ["renamed"]},
    "POST /api/v1/messages/{message_id}/feedback/": {"rating": "up"},
}


@pytest.fixture
def fake_llm(model_server, settings):
    """This module's model server (daphne was started pointing at it too)."""
    model_server.clear()
    settings.LLM_BASE_URL, settings.LLM_BUNDLED = model_server.base_url, False
    yield model_server


@pytest.fixture(scope="module")
def server(django_db_setup, model_server, tmp_path_factory):
    # Rate limits high enough for a fuzz (their own tests are elsewhere).
    with daphne_on_test_database(
        tmp_path_factory.mktemp("daphne"),
        LLM_BASE_URL=model_server.base_url,
        API_RATE_LIMIT="100000/min",
        CHAT_RATE_PER_USER="100000/min",
        CHAT_RATE_PER_ACCOUNT="100000/min",
    ) as (_, port):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def schema(server):
    return schemathesis.openapi.from_url(f"{server}/api/schema/?format=json")


@pytest.fixture
def seeded(account_a, fake_llm, run_jobs, django_capture_on_commit_callbacks) -> dict:
    """Account A's objects, each carrying MARKER; {path parameter name: A's id}."""
    owner, raw_key = account_a.test_owner, make_api_key(account_a, "a-fuzz")
    with account_context(account_a, user=owner), django_capture_on_commit_callbacks(execute=True):
        collection = collection_create(account=account_a, actor=owner, name=f"{MARKER} board")
        document, _ = document_upload(
            account=account_a,
            actor=owner,
            upload=SimpleUploadedFile(
                f"{MARKER}.txt", f"The {MARKER} plan: forty-two million euros.".encode(), content_type="text/plain"
            ),
        )
    run_jobs()
    with account_context(account_a):
        key = ApiKey.objects.for_account(account_a).get(key_hash=hash_key(raw_key))
    answer = _turns(
        account_a, api_key=key, turns=((f"What is the {MARKER} plan?", f"The {MARKER} plan [Document 1]."),)
    )[0]
    conversation = answer.conversation
    with account_context(account_a):
        MessageFeedback.objects.for_account(account_a).create(
            account=account_a, message=answer, api_key=key, rating="down", comment=f"{MARKER} feedback"
        )
        source = Source.objects.for_account(account_a).create(
            account=account_a, kind="web", url=f"https://{MARKER.lower()}.example/docs/"
        )
    with user_context(owner):
        export = DataExport.objects.for_user(owner).create(
            user=owner, status=ExportStatus.READY, account_ids=[account_a.pk], left_out=[]
        )
    return {
        "key": raw_key,
        "ids": {
            "document_id": document.pk,
            "collection_id": collection.pk,
            "conversation_id": conversation.pk,
            "message_id": answer.pk,
            "source_id": source.pk,
            "export_id": export.pk,
        },
    }


def _operations(schema):
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 30, "the schema lists too few operations"
    return operations


def _path_parameters(operation) -> list[str]:
    return [p.name for p in operation.path_parameters]


def _examples(strategy, check) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )  # no shrinking: every failure is recorded, not raised
    @given(case=strategy)
    def run(case):
        check(case)

    run()


def _strategies(operation, **fixed):
    """Positive and, where the schema has something to break, negative examples."""
    strategies = [operation.as_strategy(GenerationMode.POSITIVE, **fixed)]
    try:
        strategies.append(operation.as_strategy(GenerationMode.NEGATIVE, **fixed))
    except Exception:  # schemathesis: nothing in this operation can be made invalid
        pass
    return strategies


def _request(case, response) -> str:
    return (
        f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r} -> "
        f"{response.status_code} {response.text[:200]!r}"
    )


def test_no_operation_answers_a_server_error_and_b_never_reads_as_objects(server, schema, seeded, account_b):
    key_a, key_b = seeded["key"], make_api_key(account_b, "b-fuzz")
    http = requests.Session()
    a_headers, b_headers = {"Authorization": f"Bearer {key_a}"}, {"Authorization": f"Bearer {key_b}"}
    # The seed is really served: A's key reads its document.
    own = http.get(f"{server}/api/v1/documents/{seeded['ids']['document_id']}/", headers=a_headers, timeout=30)
    assert own.status_code == 200 and MARKER in own.text

    server_errors, leaks = [], []

    def call(case, headers):
        response = case.call(base_url=server, session=http, headers=headers, timeout=60)
        if response.status_code >= 500:
            server_errors.append(_request(case, response))
        return response

    def as_b(case):
        response = call(case, b_headers)
        if MARKER.lower() in response.text.lower():
            leaks.append(_request(case, response))
        return response

    # 1. B asks for each of A's objects by id, in every operation that takes one.
    looked_up = {}
    for operation in _operations(schema):
        names = _path_parameters(operation)
        if not names or not all(name in seeded["ids"] or name == "token" for name in names):
            continue
        fixed = {name: seeded["ids"].get(name, "0" * 64) for name in names}
        name = f"{operation.method.upper()} {operation.path}"
        answers = looked_up.setdefault(name, [])

        def check(case, answers=answers):
            response = as_b(case)
            answers.append(response.status_code)
            if 200 <= response.status_code < 300:
                leaks.append(_request(case, response))

        if name in ACCEPTED_BODIES:
            check(operation.Case(path_parameters=fixed, body=ACCEPTED_BODIES[name], media_type="application/json"))
        _examples(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=fixed), check)
    assert len(looked_up) >= 15, sorted(looked_up)
    # Each was looked up and refused as not found (or refused to any key: exports are people's).
    not_refused = {op: codes for op, codes in looked_up.items() if not {403, 404} & set(codes)}
    assert not not_refused, not_refused

    # 2. B's lists and searches hold nothing of A (the leak check reads every answer below too).
    for path in ("/api/v1/documents/", "/api/v1/conversations/", "/api/v1/collections/", "/api/v1/sources/"):
        listed = http.get(f"{server}{path}", headers=b_headers, timeout=30)
        assert listed.status_code == 200 and MARKER not in listed.text, (path, listed.text[:300])
    found = http.post(f"{server}/api/v1/search/", json={"query": f"{MARKER} plan"}, headers=b_headers, timeout=30)
    assert found.status_code == 200 and MARKER not in found.text

    # 3. Every operation, fuzzed by B then by A: never a 5xx.
    for check in (as_b, lambda case: call(case, a_headers)):
        for operation in _operations(schema):
            for strategy in _strategies(operation):
                _examples(strategy, check)

    assert not leaks, "\n".join(leaks)
    assert not server_errors, "\n".join(server_errors)
