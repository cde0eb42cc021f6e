"""The tools decide by the product's own rules, not rules of their own: the permissions table
(accounts/permissions.py) and the API's per-account rate (core.api.AccountRateThrottle). Both
are changed here, so the ASGI app runs in this process, served over loopback HTTP by uvicorn
(the test changes the table and the settings the server reads); the client is the SDK's."""

from __future__ import annotations

import threading
import time

import httpx2
import pytest
import uvicorn

from accounts.permissions import READ_KEY, RULES, WRITE_KEY, Action, Grant
from config.testing import free_port
from integrations.tests.conftest import Mcp

pytestmark = pytest.mark.django_db(transaction=True)  # the server's threads read what the tests write


@pytest.fixture(scope="module")
def served(django_db_setup):
    from config.asgi import application

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(application, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def mcp(served) -> Mcp:
    return Mcp(served)


@pytest.mark.parametrize(
    "tool, action, arguments",
    [
        ("search", Action.SEARCH, {"query": "How many days of paid holiday?"}),
        ("list_documents", Action.DOCUMENT_READ, {}),
        ("fetch_document", Action.DOCUMENT_READ, None),
        ("ask", Action.CHAT, {"question": "How many days of paid holiday?"}),
    ],
)
def test_each_tool_is_refused_when_the_table_refuses_its_action(world, mcp, monkeypatch, tool, action, arguments):
    arguments = {"document_id": world.handbook.pk} if arguments is None else arguments
    assert not mcp.call(world.reader, tool, arguments).is_error
    monkeypatch.setitem(RULES, action, {**RULES[action], READ_KEY: Grant.NONE})
    refused = mcp.refused(world.reader, tool, arguments)
    assert refused["code"] == "forbidden" and "read-only" in refused["message"]
    # The write key's column of the table still grants it.
    assert RULES[action][WRITE_KEY] is Grant.ALL and not mcp.call(world.write, tool, arguments).is_error


def test_tool_calls_count_against_the_apis_rate_with_rest(world, mcp, settings, served):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"account": "3/min"}}
    assert not mcp.call(world.write, "list_documents").is_error
    with httpx2.Client(headers={"Authorization": f"Bearer {world.write}"}) as http:
        assert http.get(f"{served}/api/v1/documents/").status_code == 200
    assert not mcp.call(world.write, "fetch_document", {"document_id": world.handbook.pk}).is_error
    limited = mcp.refused(world.write, "list_documents")
    assert limited["code"] == "rate_limited"
    # Per account: account B's key is not slowed by A's calls.
    assert not mcp.call(world.key_b, "list_documents").is_error
