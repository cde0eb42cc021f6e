"""The MCP endpoint served for real: daphne on the test database (as `make run` serves it) with
the deterministic fake model server, driven by the `mcp` SDK's own client over HTTP."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from accounts.keys import hash_key
from accounts.models import ApiKey, KeyScope
from accounts.services import api_key_create
from accounts.tests.factories import make_api_key
from core.tenancy import account_context
from documents.services import collection_create, document_move

HANDBOOK = (
    "# Holidays\n\nEveryone at Acme has twenty-eight days of paid holiday a year. Unused holiday "
    "carries over until March.\n\n# Laptops\n\nNew starters receive a laptop and a badge on day one."
)
SECRET = (
    "# Nightingale\n\nProject Nightingale will acquire Zephyrine Robotics for forty-two million "
    "euros. The Nightingale board meets in Oslo every quarter."
)
BETA = "# Beta holidays\n\nAt Beta the holiday allowance is periwinkle: thirty days of holiday a year."
ANSWER = "Everyone has twenty-eight days of paid holiday a year [Document 1]."


@pytest.fixture
def fake_llm(session_model_server, settings):
    """The model server the shared daphne was started pointing at, reset for each test."""
    session_model_server.reset()
    session_model_server.answer = ANSWER
    settings.LLM_BASE_URL, settings.LLM_BUNDLED = session_model_server.base_url, False
    yield session_model_server
    session_model_server.reset()


@pytest.fixture(scope="module")
def daphne(session_daphne):
    return f"http://127.0.0.1:{session_daphne[1]}"


def key_row(account, raw: str) -> ApiKey:
    with account_context(account):
        return ApiKey.objects.for_account(account).get(key_hash=hash_key(raw))


def read_key(account, name: str = "reader") -> str:
    with account_context(account):
        _, raw = api_key_create(account=account, actor=None, name=name, scope=KeyScope.READ)
    return raw


@dataclass
class World:
    """Account A: the handbook (General) and a secret in the restricted collection Board, which
    only `insider` may see; a write key, a read key. Account B: its own document and key."""

    a: object
    b: object
    handbook: object
    secret: object
    beta: object
    write: str
    reader: str
    insider: str
    key_b: str


@pytest.fixture
def world(account_a, account_b, fake_llm, upload_and_ingest) -> World:
    write, reader, insider, key_b = (
        make_api_key(account_a, "write"),
        read_key(account_a),
        make_api_key(account_a, "insider"),
        make_api_key(account_b),
    )
    owner = account_a.test_owner
    with account_context(account_a, user=owner):
        board = collection_create(
            account=account_a, actor=owner, name="Board", restricted=True, api_key_ids=[key_row(account_a, insider).pk]
        )
    handbook = upload_and_ingest(account_a, "handbook.md", HANDBOOK.encode(), "text/markdown")
    secret = upload_and_ingest(account_a, "nightingale.md", SECRET.encode(), "text/markdown")
    with account_context(account_a, user=owner):
        secret = document_move(account=account_a, actor=owner, document=secret, collection=board)
    beta = upload_and_ingest(account_b, "beta.md", BETA.encode(), "text/markdown")
    assert handbook.status == secret.status == beta.status == "ready"
    return World(
        a=account_a,
        b=account_b,
        handbook=handbook,
        secret=secret,
        beta=beta,
        write=write,
        reader=reader,
        insider=insider,
        key_b=key_b,
    )


class Mcp:
    """The SDK's client against one server: `mcp.call(key, tool, args)`, `mcp.tools(key)`.
    `mode`: "legacy" is the initialize handshake (what today's desktop clients speak), "auto"
    the SDK's default (probes server/discover, the 2026 protocol)."""

    def __init__(self, base_url: str, mode: str = "legacy"):
        self.url = base_url + "/mcp"
        self.mode = mode

    async def _with_client(self, key: str | None, use):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(self.url, http_client=http), mode=self.mode) as client,
        ):
            return await use(client)

    def tools(self, key: str):
        return asyncio.run(self._with_client(key, lambda client: client.list_tools())).tools

    def call(self, key: str | None, tool: str, arguments: dict | None = None):
        return asyncio.run(self._with_client(key, lambda client: client.call_tool(tool, arguments or {})))

    def ok(self, key: str, tool: str, arguments: dict | None = None) -> dict:
        result = self.call(key, tool, arguments)
        assert not result.is_error, result.content
        return result.structured_content

    def refused(self, key: str, tool: str, arguments: dict | None = None) -> dict:
        """The house error a tool answered with: {"code", "message", …}."""
        result = self.call(key, tool, arguments)
        assert result.is_error, result.structured_content
        return result.structured_content["error"]


@pytest.fixture(params=["legacy", "auto"])
def mcp(daphne, request) -> Mcp:
    return Mcp(daphne, mode=request.param)


@pytest.fixture
def mcp_legacy(daphne) -> Mcp:
    return Mcp(daphne)


def rest_call(daphne: str, key: str, method: str, path: str, **kwargs):
    with httpx2.Client(timeout=60, headers={"Authorization": f"Bearer {key}"}) as http:
        return http.request(method, f"{daphne}/api/v1/{path}", **kwargs)


def texts_of(found: dict) -> str:
    return " ".join(result["text"] for result in found["results"])


def prompts_sent(fake_llm) -> str:
    """Everything the model was sent to answer questions since the last `clear()`."""
    return json.dumps([body["messages"] for body in fake_llm.requests_to("/v1/chat/completions")])
