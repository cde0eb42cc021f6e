"""Property-based fuzzing of every operation in the OpenAPI schema: never a 5xx, always
the contract's JSON error shape for 4xx."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from accounts.tests.factories import make_api_key

pytestmark = pytest.mark.slow


@pytest.fixture
def schema(db):
    from django.core import signals
    from django.db import close_old_connections

    from config.wsgi import application

    # Like Django's test client: keep the test's connection (and transaction) open across
    # the WSGI requests schemathesis makes.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


# Dify's External Knowledge API answers in Dify's shape (retrieval/dify.py), by contract.
DIFY_PATH = "/api/v1/dify/"


def _error_keys(case) -> set[str]:
    return {"error_code", "error_msg"} if case.formatted_path.startswith(DIFY_PATH) else {"error"}


def _operations(schema):
    operations = [result.ok() for result in schema.get_all_operations()]
    assert operations, "the schema lists no operations"
    return operations


def test_schema_fuzzing_never_gives_a_server_error(schema, account_a, fake_llm):
    headers = {"Authorization": f"Bearer {make_api_key(account_a)}"}
    for operation in _operations(schema):

        @settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def check(case):
            response = case.call(headers=headers)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:300]}"
            )
            if response.status_code >= 400:
                assert set(response.json()) == _error_keys(case)

        check()


def test_unauthenticated_fuzzing_gets_json_401s(schema, db):
    for operation in _operations(schema):

        @settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def check(case):
            response = case.call(headers={"Authorization": "Bearer gw_not-a-key"})
            # A path the router cannot match (e.g. a negative id) is a 404 before any view runs;
            # a NUL character anywhere in the request is refused as malformed (400) before
            # authentication, like an over-long body.
            assert response.status_code in (400, 401, 404), response.text[:300]
            if case.formatted_path.startswith(DIFY_PATH):  # Dify's codes: 1002 an unknown key
                assert response.json()["error_code"] in (400, 1002), response.text[:300]
                return
            expected = {400: "bad_request", 401: "invalid_api_key", 404: "not_found"}[response.status_code]
            assert response.json()["error"]["code"] == expected
            if response.status_code == 400:
                assert "NUL character" in response.json()["error"]["message"]

        check()
