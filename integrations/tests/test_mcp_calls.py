"""How one tool call runs (integrations.mcp_server._serve), below the protocol: like a REST
request, as the key (the audit log's actor), in one transaction of the key's account that a
failure rolls back, every failure answered with the REST error body."""

from __future__ import annotations

import pytest

from accounts.permissions import Action
from accounts.tests.factories import make_api_key
from audit.models import ActorKind, AuditEntry
from audit.services import audit_record
from core.errors import NotFound
from core.tenancy import account_context, current_context
from integrations.mcp_server import _serve, document_text
from integrations.tests.conftest import key_row

# A call returns its connection when it ends (it runs in a worker thread of its own): no
# test transaction may be open around it.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key(account_a):
    return key_row(account_a, make_api_key(account_a, "integration"))


def _entries(account):
    with account_context(account):
        return list(AuditEntry.objects.for_account(account).order_by("pk"))


def test_what_a_tool_writes_is_audited_with_the_key_as_actor(account_a, key):
    def work():
        context = current_context()
        assert (context.account_id, context.api_key_id, context.user_id) == (account_a.pk, key.pk, None)
        audit_record(account=account_a, action="document.reindex", target="handbook.md")
        return {"done": True}

    answer = _serve(key, "test", Action.SEARCH, work)
    assert not answer.is_error and answer.structured_content == {"done": True}
    entry = _entries(account_a)[-1]
    assert (entry.action, entry.actor_kind, entry.actor_id) == ("document.reindex", ActorKind.KEY, key.pk)


def test_a_failed_call_rolls_back_what_it_wrote_and_answers_the_rest_error(account_a, key):
    before = len(_entries(account_a))

    def work():
        audit_record(account=account_a, action="document.reindex", target="handbook.md")
        raise NotFound("That document was not found.")

    answer = _serve(key, "test", Action.SEARCH, work)
    assert answer.is_error
    assert answer.structured_content == {"error": {"code": "not_found", "message": "That document was not found."}}
    assert len(_entries(account_a)) == before


def test_an_unexpected_failure_is_a_server_error_without_its_details(account_a, key):
    def work():
        raise RuntimeError("secret internals")

    answer = _serve(key, "test", Action.SEARCH, work)
    assert answer.is_error and answer.structured_content["error"]["code"] == "server_error"
    assert "secret" not in answer.content[0].text


def test_a_documents_text_says_each_chunks_overlap_once():
    chunks = [
        "Everyone has twenty-eight days of paid holiday. Unused holiday carries over",
        "Unused holiday carries over until March.",
        "# Laptops\n\nNew starters get a laptop.",
    ]
    assert document_text(chunks) == (
        "Everyone has twenty-eight days of paid holiday. Unused holiday carries over"
        " until March.\n# Laptops\n\nNew starters get a laptop."
    )
    assert document_text([]) == "" and document_text(["one chunk "]) == "one chunk "
