"""`/mcp` (CONTRACT, "Added in the third wave"): the Model Context Protocol over Streamable HTTP,
served by daphne, driven by the `mcp` SDK's own client. Each tool acts with the API key's
account, scope, collections and budget, and answers what its REST counterpart answers."""

from __future__ import annotations

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from accounts.services import api_key_revoke
from billing import references
from billing.budgets import budget_set
from billing.models import CreditHold, CreditLedgerEntry, HoldStatus
from chat.models import Conversation
from core.tenancy import account_context
from integrations.tests.conftest import key_row, prompts_sent, rest_call, texts_of

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]  # daphne reads what the tests write

TOOLS = {"search", "list_documents", "fetch_document", "ask"}
RESULT_FIELDS = {"document_id", "document_name", "chunk_index", "pages", "score", "text"}


# --- the protocol ---------------------------------------------------------------------------


def test_the_four_tools_are_listed_with_their_arguments(world, mcp):
    tools = {tool.name: tool for tool in mcp.tools(world.write)}
    assert set(tools) == TOOLS
    assert set(tools["search"].input_schema["properties"]) >= {"query", "top_k", "tags"}
    assert tools["search"].input_schema["required"] == ["query"]
    assert tools["fetch_document"].input_schema["required"] == ["document_id"]
    assert set(tools["ask"].input_schema["properties"]) >= {"question", "conversation_id"}
    assert all(tool.description for tool in tools.values())


def test_search_answers_the_rest_search_results_and_is_charged(world, mcp, daphne):
    found = mcp.ok(world.write, "search", {"query": "How many days of paid holiday?", "top_k": 3})
    assert found["results"] and all(set(r) == RESULT_FIELDS for r in found["results"])
    assert found["results"][0]["document_id"] == world.handbook.pk
    assert "twenty-eight days of paid holiday" in found["results"][0]["text"]
    rest = rest_call(
        daphne, world.write, "POST", "search/", json={"query": "How many days of paid holiday?", "top_k": 3}
    )
    assert rest.status_code == 200
    assert [(r["document_id"], r["chunk_index"]) for r in found["results"]] == [
        (r["document_id"], r["chunk_index"]) for r in rest.json()["results"]
    ]
    key = key_row(world.a, world.write)
    with account_context(world.a):
        charges = CreditLedgerEntry.objects.for_account(world.a).filter(
            reference=references.SEARCH, spent_by_api_key=key
        )
        assert charges.count() == 2 and all(entry.delta < 0 for entry in charges)
        assert key.__class__.objects.for_account(world.a).get(pk=key.pk).last_used_at is not None


def test_search_refuses_bad_arguments_with_the_rest_errors(world, mcp_legacy):
    too_many = mcp_legacy.refused(world.write, "search", {"query": "holiday", "top_k": 51})
    assert too_many["code"] == "invalid" and "top_k" in too_many["message"]
    assert mcp_legacy.refused(world.write, "search", {"query": ""})["code"] == "invalid"
    assert mcp_legacy.refused(world.write, "search", {"query": "holiday", "collection": 999_999})["code"] == "not_found"


def test_list_documents_is_the_rest_list(world, mcp, daphne):
    listed = mcp.ok(world.write, "list_documents")
    rest = rest_call(daphne, world.write, "GET", "documents/").json()["results"]
    assert listed["results"] == rest
    assert [d["id"] for d in listed["results"]] == [world.handbook.pk]  # the secret is in Board
    assert mcp.ok(world.write, "list_documents", {"query": "nothing like this"})["results"] == []


def test_fetch_document_answers_its_whole_text(world, mcp):
    fetched = mcp.ok(world.write, "fetch_document", {"document_id": world.handbook.pk})
    assert fetched["id"] == world.handbook.pk and fetched["name"] == "handbook.md"
    for sentence in (
        "twenty-eight days of paid holiday",
        "Unused holiday carries over until March.",
        "New starters receive a laptop and a badge on day one.",
    ):
        assert fetched["text"].count(sentence) == 1, fetched["text"]
    assert mcp.refused(world.write, "fetch_document", {"document_id": 2**70})["code"] == "not_found"


def test_ask_answers_with_citations_is_charged_and_continues_a_conversation(world, mcp_legacy, fake_llm):
    answered = mcp_legacy.ok(world.write, "ask", {"question": "How many days of paid holiday do we get?"})
    assert answered["answer"] == fake_llm.answer
    assert [(c["n"], c["document_id"]) for c in answered["citations"]] == [(1, world.handbook.pk)]
    assert answered["usage"]["total_tokens"] > 0
    key = key_row(world.a, world.write)
    with account_context(world.a):
        charge = CreditLedgerEntry.objects.for_account(world.a).get(
            reference=references.message(answered["message_id"])
        )
        assert charge.spent_by_api_key_id == key.pk and charge.delta < 0 and charge.tokens > 0
        assert not CreditHold.objects.for_account(world.a).filter(status=HoldStatus.OPEN).exists()
    follow_up = mcp_legacy.ok(
        world.write,
        "ask",
        {"question": "And does unused holiday carry over?", "conversation_id": answered["conversation_id"]},
    )
    assert follow_up["conversation_id"] == answered["conversation_id"]
    with account_context(world.a):
        conversation = Conversation.objects.for_account(world.a).get(pk=answered["conversation_id"])
        assert conversation.api_key_id == key.pk and conversation.messages.count() == 4


# --- authentication -------------------------------------------------------------------------


def _initialize(daphne: str, headers: dict) -> httpx2.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
    }
    with httpx2.Client(timeout=30) as http:
        return http.post(
            f"{daphne}/mcp", json=body, headers={"Accept": "application/json, text/event-stream", **headers}
        )


def test_without_a_key_or_with_a_revoked_one_the_answer_is_401(world, daphne, mcp_legacy):
    nobody = _initialize(daphne, {})
    assert nobody.status_code == 401 and nobody.json()["error"]["code"] == "unauthenticated"
    assert nobody.headers["WWW-Authenticate"].startswith("Bearer")
    unknown = _initialize(daphne, {"Authorization": "Bearer gw_not-a-key"})
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "invalid_api_key"
    assert _initialize(daphne, {"Authorization": f"Bearer {world.write}"}).status_code == 200

    with account_context(world.a):
        api_key_revoke(account=world.a, actor=None, key_id=key_row(world.a, world.write).pk)
    revoked = _initialize(daphne, {"Authorization": f"Bearer {world.write}"})
    assert revoked.status_code == 401 and revoked.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(ExceptionGroup) as refused_by_sdk:  # the SDK's client fails to connect
        mcp_legacy.tools(world.write)
    assert refused_by_sdk.value.subgroup(lambda exc: isinstance(exc, MCPError)) is not None


def test_only_post_is_served_stateless_there_is_no_stream_to_open(world, daphne):
    with httpx2.Client(timeout=10, headers={"Authorization": f"Bearer {world.write}"}) as http:
        for method in ("GET", "DELETE"):
            answer = http.request(method, f"{daphne}/mcp", headers={"Accept": "text/event-stream"})
            assert answer.status_code == 405 and answer.headers["Allow"] == "POST"
            assert answer.json()["error"]["code"] == "method_not_allowed"


def test_an_oversized_body_is_413_before_anything_reads_it(world, daphne):
    with httpx2.Client(timeout=30) as http:
        answer = http.post(
            f"{daphne}/mcp",
            content=b"{" + b" " * (2 * 1024 * 1024) + b"}",
            headers={"Authorization": f"Bearer {world.write}", "Content-Type": "application/json"},
        )
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "too_large"


def test_a_host_outside_allowed_hosts_is_refused(world, daphne):
    refused = _initialize(daphne, {"Authorization": f"Bearer {world.write}", "Host": "evil.test"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "bad_request"


# --- isolation: accounts, collections, scope, budget ------------------------------------------


def test_another_accounts_ids_are_not_found_and_its_text_never_found(world, mcp, fake_llm):
    assert mcp.refused(world.key_b, "fetch_document", {"document_id": world.handbook.pk})["code"] == "not_found"
    assert [d["id"] for d in mcp.ok(world.key_b, "list_documents")["results"]] == [world.beta.pk]
    found = mcp.ok(world.key_b, "search", {"query": "twenty-eight days of paid holiday at Acme", "top_k": 10})
    assert {r["document_id"] for r in found["results"]} <= {world.beta.pk}
    assert "twenty-eight" not in texts_of(found) and "Acme" not in texts_of(found)
    fake_llm.clear()
    assert mcp.ok(world.key_b, "ask", {"question": "How many days of paid holiday at Acme?"})["answer"]
    assert "twenty-eight" not in prompts_sent(fake_llm) and "periwinkle" in prompts_sent(fake_llm)
    mine = mcp.ok(world.write, "ask", {"question": "How many days of paid holiday?"})
    theirs = mcp.refused(world.key_b, "ask", {"question": "Go on", "conversation_id": mine["conversation_id"]})
    assert theirs["code"] == "not_found"


def test_another_keys_conversation_in_the_same_account_is_not_found(world, mcp_legacy):
    mine = mcp_legacy.ok(world.write, "ask", {"question": "How many days of paid holiday?"})
    other = mcp_legacy.refused(world.reader, "ask", {"question": "Go on", "conversation_id": mine["conversation_id"]})
    assert other["code"] == "not_found"


def test_a_restricted_collection_is_invisible_to_a_key_without_access(world, mcp, fake_llm):
    question = {"query": "Project Nightingale Zephyrine Robotics acquisition", "top_k": 10}
    assert mcp.refused(world.write, "fetch_document", {"document_id": world.secret.pk})["code"] == "not_found"
    assert world.secret.pk not in {d["id"] for d in mcp.ok(world.write, "list_documents")["results"]}
    assert "Zephyrine" not in texts_of(mcp.ok(world.write, "search", question))

    fake_llm.clear()
    answered = mcp.ok(world.write, "ask", {"question": "What will Project Nightingale acquire, Zephyrine Robotics?"})
    assert world.secret.pk not in {c["document_id"] for c in answered["citations"]}
    assert "forty-two million" not in prompts_sent(fake_llm)

    assert "Zephyrine" in mcp.ok(world.insider, "fetch_document", {"document_id": world.secret.pk})["text"]
    assert world.secret.pk in {d["id"] for d in mcp.ok(world.insider, "list_documents")["results"]}
    assert "Zephyrine" in texts_of(mcp.ok(world.insider, "search", question))


def test_a_read_key_may_search_list_fetch_and_ask_as_the_rest_api_lets_it(world, mcp_legacy):
    """accounts/permissions.py: a read key may read, search and chat (test_mcp_rules.py shows the
    tools refuse what the table refuses)."""
    assert mcp_legacy.ok(world.reader, "search", {"query": "holiday"})["results"]
    assert mcp_legacy.ok(world.reader, "list_documents")["results"]
    assert mcp_legacy.ok(world.reader, "fetch_document", {"document_id": world.handbook.pk})["text"]
    assert mcp_legacy.ok(world.reader, "ask", {"question": "How many days of paid holiday?"})["citations"]


def test_a_key_over_its_budget_is_refused_ask_with_the_house_code(world, mcp_legacy):
    owner = world.a.test_owner
    key = key_row(world.a, world.reader)
    with account_context(world.a, user=owner):
        budget_set(account=world.a, actor=owner, period="day", limit=1, api_key_id=key.pk)
    refused = mcp_legacy.refused(world.reader, "ask", {"question": "How many days of paid holiday?"})
    assert refused["code"] == "budget_exceeded" and "budget" in refused["message"].lower()
    assert (
        mcp_legacy.refused(world.reader, "search", {"query": "How many days of paid holiday do we get?"})["code"]
        == "budget_exceeded"
    )
    with account_context(world.a):
        assert not CreditHold.objects.for_account(world.a).filter(status=HoldStatus.OPEN).exists()
        assert not CreditLedgerEntry.objects.for_account(world.a).filter(spent_by_api_key=key).exists()
    # The other key of the account has no budget: it still asks.
    assert mcp_legacy.ok(world.write, "ask", {"question": "How many days of paid holiday?"})["answer"]
