"""A chat turn is refused before anything runs or not at all: its hold covers the query
embedding (drawn from the hold), so a member at the edge of a cap gets `budget_exceeded`
up front, never after the hold. And `chat.done` carries what the principal's budget has
left, for the header's "N left today"."""

import pytest
from django.test import Client

from accounts.models import Role
from accounts.tests.factories import add_member, make_user
from billing.budgets import budget_set, budget_status_for
from billing.models import CreditHold, CreditLedgerEntry
from billing.services import credits_debit, credits_hold
from core.tenancy import account_context

HANDBOOK = (
    "# Holidays\n\nEveryone at Acme has twenty-eight days of paid holiday a year. Unused holiday "
    "carries over until March.\n\n# Laptops\n\nNew starters receive a laptop and a badge on day one."
)
QUESTION = "How much holiday do we get?"


@pytest.fixture
def handbook(account_a, fake_llm, upload_and_ingest):
    return upload_and_ingest(account_a, "handbook.md", HANDBOOK.encode())


def _member(account, owner, email, limit):
    user = make_user(email)
    add_member(account, user, role=Role.MEMBER)
    if limit:
        with account_context(account):
            budget_set(account=account, actor=owner, period="day", limit=limit, user_id=user.pk)
    client = Client()
    client.force_login(user)
    return user, client


def _entries(account, user):
    with account_context(account):
        return list(CreditLedgerEntry.objects.for_account(account).filter(spent_by_user=user).order_by("pk"))


def _status(account, user):
    with account_context(account):
        [status] = budget_status_for(account=account, user=user)
    return status


def _ask(client):
    return client.post("/api/v1/chat/", {"message": QUESTION}, content_type="application/json")


def test_the_turns_hold_covers_the_query_embedding_and_the_edge_never_passes_the_cap(
    account_a, owner_a, handbook, fake_llm
):
    # What one turn of this question holds (the worst case, query embedding included).
    first, first_client = _member(account_a, owner_a, "first@a.test", 10**6)
    assert _ask(first_client).status_code == 200
    entries = _entries(account_a, first)
    [hold] = [e for e in entries if e.kind == "hold"]
    held = -hold.delta
    # The query embedding was drawn from the hold: charged to the member, balance unchanged by the draw.
    [query] = [e for e in entries if e.kind == "embedding"]
    [drawn] = [e for e in entries if e.idempotency_key == f"{query.idempotency_key}:from-hold"]
    assert drawn.kind == "hold_release" and drawn.delta == -query.delta
    assert query.spent_by_user_id == first.pk
    # Spent in all: the query and the answer, within what was held.
    assert 0 < _status(account_a, first).spent <= held

    # One credit short of the worst case: the turn holds what the budget has left
    # and is fitted to it; the cap is never passed.
    edge, edge_client = _member(account_a, owner_a, "edge@a.test", held - 1)
    assert _ask(edge_client).status_code == 200
    assert 0 < _status(account_a, edge).spent <= held - 1

    # Below the least a turn needs (its prompt and a short answer): refused before anything
    # runs (nothing held, nothing embedded, nothing written), where the query embedding used
    # to be refused after the hold.
    short, short_client = _member(account_a, owner_a, "short@a.test", 20)
    fake_llm.clear()
    response = _ask(short_client)
    assert response.status_code == 402 and response.json()["error"]["code"] == "budget_exceeded"
    assert _entries(account_a, short) == []
    assert fake_llm.requests == []

    # Exactly the hold: the whole turn runs, and the cap is never passed.
    exact, exact_client = _member(account_a, owner_a, "exact@a.test", held)
    assert _ask(exact_client).json()["answer"]
    assert 0 < _status(account_a, exact).spent <= held


def test_a_draw_from_the_hold_changes_neither_balance_nor_budget_spend(account_a, owner_a):
    member, _ = _member(account_a, owner_a, "m@a.test", 1000)
    with account_context(account_a):
        hold = credits_hold(account=account_a, amount=1000, key="turn", user=member)
        before = budget_status_for(account=account_a, user=member)[0].spent
        credits_debit(account=account_a, tokens=40, key="turn:query", kind="embedding", user=member, hold=hold)
        # At the cap: an ordinary debit would be refused (1000 held + 40 > 1000).
        assert budget_status_for(account=account_a, user=member)[0].spent == before == 1000
        assert CreditHold.objects.for_account(account_a).get(pk=hold.pk).amount == 960
        # A closed hold is not drawn from: the debit is checked like any other.
        from billing.errors import BudgetExceeded
        from billing.services import hold_release

        hold_release(hold=hold)
        assert budget_status_for(account=account_a, user=member)[0].spent == 40
        credits_debit(account=account_a, tokens=960, key="after", kind="embedding", user=member, hold=hold)
        with pytest.raises(BudgetExceeded):
            credits_debit(account=account_a, tokens=1, key="past", kind="embedding", user=member, hold=hold)


@pytest.mark.django_db(transaction=True)
def test_chat_done_carries_the_principals_budget_remaining(client, account_a, owner_a, handbook, fake_llm):
    from chat.tests.test_websocket import Socket, _session_headers

    member, _ = _member(account_a, owner_a, "m@a.test", 1_000_000)
    socket = Socket(_session_headers(client, member, "http://localhost:8000"))
    assert socket.connect()[0]
    done = socket.ask(QUESTION)[-1]
    assert done["type"] == "chat.done"
    status = _status(account_a, member)
    assert status.spent > 0
    assert (done["budget_remaining"], done["budget_period"]) == (1_000_000 - status.spent, "day")
    assert isinstance(done["credits_remaining"], int) and done["usage"]["total_tokens"] > 0
    socket.close()
    # Without a budget: null, and the rest as before.
    socket = Socket(_session_headers(Client(), owner_a, "http://localhost:8000"))
    assert socket.connect()[0]
    done = socket.ask(QUESTION)[-1]
    assert done["type"] == "chat.done" and done["budget_remaining"] is None and done["budget_period"] is None
    socket.close()
