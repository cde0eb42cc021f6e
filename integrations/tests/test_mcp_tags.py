"""Tags steer MCP's retrieval as they steer REST's (CONTRACT, "Added in the third wave"): `search`
and `ask` take `tags` (only documents with any of them) and `exclude_tags`, and the account's
excluded tags keep documents out of both, in the same SQL as the REST API's."""

from __future__ import annotations

import pytest

from core.tenancy import account_context
from documents.tags import document_tags_set, retrieval_exclude_tags_set
from integrations.tests.conftest import prompts_sent, rest_call, texts_of

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

MENU = "# Canteen menu\n\nThe canteen serves lentil soup on Mondays and paid holiday cake on Fridays."
QUESTION = "What does the canteen serve, and how many days of paid holiday?"


@pytest.fixture
def tagged(world, upload_and_ingest):
    owner = world.a.test_owner
    menu = upload_and_ingest(world.a, "menu.md", MENU.encode(), "text/markdown")
    with account_context(world.a, user=owner):
        document_tags_set(account=world.a, actor=owner, document=menu, tags=["Kitchen"])
        document_tags_set(account=world.a, actor=owner, document=world.handbook, tags=["hr"])
    world.menu = menu
    return world


def _found_ids(found: dict) -> set[int]:
    return {r["document_id"] for r in found["results"]}


def test_search_and_ask_list_tags_among_their_arguments(world, mcp_legacy):
    tools = {tool.name: tool for tool in mcp_legacy.tools(world.write)}
    for name in ("search", "ask"):
        assert {"tags", "exclude_tags"} <= set(tools[name].input_schema["properties"])


def test_search_keeps_to_the_tags_asked_for_and_leaves_out_the_excluded(tagged, mcp, daphne):
    both = mcp.ok(tagged.write, "search", {"query": QUESTION, "top_k": 10})
    assert _found_ids(both) == {tagged.menu.pk, tagged.handbook.pk}
    only = mcp.ok(tagged.write, "search", {"query": QUESTION, "top_k": 10, "tags": ["kitchen"]})
    assert _found_ids(only) == {tagged.menu.pk}
    rest = rest_call(
        daphne, tagged.write, "POST", "search/", json={"query": QUESTION, "top_k": 10, "tags": ["kitchen"]}
    )
    assert rest.json()["results"] == only["results"]
    without = mcp.ok(tagged.write, "search", {"query": QUESTION, "top_k": 10, "exclude_tags": ["KITCHEN"]})
    assert _found_ids(without) == {tagged.handbook.pk} and "lentil" not in texts_of(without)


def test_ask_answers_only_from_the_tagged_documents(tagged, mcp_legacy, fake_llm):
    fake_llm.clear()
    answered = mcp_legacy.ok(tagged.write, "ask", {"question": QUESTION, "tags": ["kitchen"]})
    assert {c["document_id"] for c in answered["citations"]} == {tagged.menu.pk}
    assert "lentil soup" in prompts_sent(fake_llm) and "twenty-eight" not in prompts_sent(fake_llm)
    fake_llm.clear()
    answered = mcp_legacy.ok(tagged.write, "ask", {"question": QUESTION, "exclude_tags": ["kitchen"]})
    assert {c["document_id"] for c in answered["citations"]} == {tagged.handbook.pk}
    assert "lentil" not in prompts_sent(fake_llm)


def test_the_accounts_excluded_tags_keep_documents_out_of_search_and_ask(tagged, mcp_legacy, fake_llm):
    owner = tagged.a.test_owner
    with account_context(tagged.a, user=owner):
        retrieval_exclude_tags_set(account=tagged.a, actor=owner, exclude_tags=["kitchen"])
    asked_for = mcp_legacy.ok(tagged.write, "search", {"query": QUESTION, "top_k": 10, "tags": ["kitchen"]})
    assert asked_for["results"] == []
    assert _found_ids(mcp_legacy.ok(tagged.write, "search", {"query": QUESTION, "top_k": 10})) == {tagged.handbook.pk}
    fake_llm.clear()
    mcp_legacy.ok(tagged.write, "ask", {"question": QUESTION})
    assert "lentil" not in prompts_sent(fake_llm)


def test_malformed_tags_are_refused_with_the_rest_error(world, mcp_legacy):
    for tool, arguments in (("search", {"query": "holiday"}), ("ask", {"question": "How many days of holiday?"})):
        refused = mcp_legacy.refused(world.write, tool, {**arguments, "tags": ["hr, kitchen"]})
        assert refused["code"] == "invalid_tags" and "comma" in refused["message"]
        refused = mcp_legacy.refused(world.write, tool, {**arguments, "exclude_tags": ["x" * 41]})
        assert refused["code"] == "invalid_tags"
