"""What a websocket chat turn costs the database before its first token:
at most 13 SQL statements and 2 commits, whatever the surface's principal, so it cannot
creep back. Counted by a pass-through spy on psycopg (chat/tests/sql_tally.py) while the
model server holds the answer back between its words, so the first token is on the client
before anything after it (settling, storing the answer) can have run.

And the ledger a turn writes through the one-statement hold and settle: the same entries,
in the same order, as the ORM path wrote, with what the turn drew from its hold (the query
embedding) recorded at settle, and nothing crossing accounts."""

import pytest
from django.db import ProgrammingError

from accounts.models import Role
from accounts.tests.factories import add_member, make_user
from billing.errors import InsufficientCredits
from billing.models import CreditHold, CreditLedgerEntry
from billing.selectors import balance_get
from billing.services import HoldDraw, credits_hold, hold_release, hold_settle
from chat.tests.sql_tally import sql_tally
from chat.tests.test_socket_security import _member_socket
from chat.tests.test_websocket import _key_socket
from core.tenancy import account_context

pytestmark = pytest.mark.django_db(transaction=True)

# 13: the question is stored in the first transaction, with the hold, before any model is
# asked (a busy model server's failure leaves it in its conversation), and the second writes
# what its retrieval found onto it: one UPDATE more than when it was inserted only then.
MAX_STATEMENTS = 13
MAX_COMMITS = 2


def _turn(socket, message, **extra):
    """(frames, what was sent before the first token, what the whole turn sent)."""
    with sql_tally() as tally:
        socket.send({"type": "chat.message", "message": message, **extra})
        frames, before = [], None
        while True:
            frame = socket.receive(timeout=20)
            frames.append(frame)
            if frame["type"] == "chat.token" and before is None:
                before = tally.snapshot()
            if frame["type"] in ("chat.done", "chat.error"):
                break
    assert frames[-1]["type"] == "chat.done", frames[-1]
    return frames, before, tally.snapshot()


def _within_budget(snapshot):
    listing = "\n".join(snapshot["sql"])
    assert snapshot["statements"] <= MAX_STATEMENTS, listing
    # Every transaction ends in a commit (a statement outside one would be its own).
    assert snapshot["autocommit_statements"] == 0 and snapshot["rollbacks"] == 0, listing
    assert snapshot["commits"] <= MAX_COMMITS, listing


@pytest.fixture
def slow_words(fake_llm):
    """An answer the model writes a word at a time, 50 ms apart."""
    fake_llm.answer = " ".join(f"word{i}" for i in range(12)) + " twenty-eight days [Document 1]."
    fake_llm.backend.chunk_delay = 0.05
    return fake_llm


def test_an_api_key_turn_before_its_first_token(account_a, handbook, slow_words):
    socket = _key_socket(account_a)
    frames, before, whole = _turn(socket, "How many holiday days do we get?")
    assert frames[0]["type"] == "chat.sources" and frames[0]["sources"]  # a lookup: it searched
    _within_budget(before)
    # Settling and storing the answer add one transaction after the answer.
    assert whole["commits"] == before["commits"] + 1
    # The next question in the same conversation reads its history too.
    frames, before, _ = _turn(
        socket, "How many holiday days do we get in March?", conversation_id=frames[0]["conversation_id"]
    )
    assert frames[0]["sources"]
    _within_budget(before)
    socket.close()


def test_a_members_turn_before_its_first_token(client, account_a, handbook, slow_words):
    socket, _member, _membership = _member_socket(client, account_a)
    frames, before, _ = _turn(socket, "How many holiday days do we get?")
    assert frames[0]["sources"]
    _within_budget(before)
    socket.close()


# --- the ledger through the one-statement hold and settle ---------------------------------


def _ledger(account):
    return [
        (e.kind, e.delta, e.balance_after, e.idempotency_key, e.tokens, e.spent_by_user_id)
        for e in CreditLedgerEntry.objects.for_account(account).order_by("pk")
    ]


def test_hold_and_settle_with_a_draw_write_what_the_orm_path_wrote(account_a):
    member = make_user("m@a.test")
    add_member(account_a, member, role=Role.MEMBER)
    with account_context(account_a):
        start = balance_get(account=account_a)
        with sql_tally() as tally:
            hold = credits_hold(account=account_a, amount=1000, key="turn", reference="conversation:1", user=member)
        assert tally.snapshot()["statements"] == 1  # no budget, a new key, enough credits
        draw = HoldDraw(key="turn:query", kind="embedding", tokens=7, model="m", provider="p", reference="search")
        with sql_tally() as tally:
            entry = hold_settle(
                hold=hold, used_tokens=300, model="chat-m", provider="p", reference="message:9", draws=(draw,)
            )
        assert tally.snapshot()["statements"] == 1
        assert entry.balance_after == balance_get(account=account_a) == start - 7 - 300
        assert entry.delta == -300 and entry.tokens == 300 and entry.reference == "message:9"
        assert _ledger(account_a)[-5:] == [
            ("hold", -1000, start - 1000, "turn", 0, member.pk),
            ("hold_release", 7, start - 993, "turn:query:from-hold", 0, member.pk),
            ("embedding", -7, start - 1000, "turn:query", 7, member.pk),
            ("hold_release", 993, start - 7, "turn:release", 0, member.pk),
            ("chat", -300, start - 307, "turn:charge", 300, member.pk),
        ]
        stored = CreditHold.objects.for_account(account_a).get(pk=hold.pk)
        assert (stored.status, stored.used_tokens, stored.amount) == ("settled", 300, 993)
        # Settling again answers the same, writes nothing.
        count = CreditLedgerEntry.objects.for_account(account_a).count()
        assert hold_settle(hold=stored, used_tokens=300).pk == entry.pk
        assert CreditLedgerEntry.objects.for_account(account_a).count() == count


def test_a_released_hold_still_charges_its_draws(account_a):
    with account_context(account_a):
        start = balance_get(account=account_a)
        hold = credits_hold(account=account_a, amount=500, key="failed-turn")
        hold_release(hold=hold, draws=(HoldDraw(key="failed-turn:query", kind="embedding", tokens=5),))
        hold_release(hold=hold)  # idempotent
        assert balance_get(account=account_a) == start - 5
        stored = CreditHold.objects.for_account(account_a).get(pk=hold.pk)
        assert (stored.status, stored.used_tokens, stored.amount) == ("released", 0, 495)


def test_a_hold_beyond_the_balance_writes_nothing(account_a):
    with account_context(account_a):
        start = balance_get(account=account_a)
        count = CreditLedgerEntry.objects.for_account(account_a).count()
        with pytest.raises(InsufficientCredits):
            credits_hold(account=account_a, amount=start + 1, key="too-much")
        assert balance_get(account=account_a) == start
        assert CreditLedgerEntry.objects.for_account(account_a).count() == count
        assert not CreditHold.objects.for_account(account_a).exists()


def test_another_accounts_hold_cannot_be_settled_or_released(account_a, account_b):
    with account_context(account_a):
        hold = credits_hold(account=account_a, amount=400, key="a-turn")
        a_before = balance_get(account=account_a)
    with account_context(account_b):
        b_before = balance_get(account=account_b)
        # B's context sees neither A's balance row nor A's hold: nothing is settled.
        with pytest.raises(ProgrammingError, match="row-level security"):
            hold_settle(hold=hold, used_tokens=100)
    with account_context(account_b):
        with pytest.raises(ProgrammingError, match="row-level security"):
            hold_release(hold=hold)
    with account_context(account_b):
        assert balance_get(account=account_b) == b_before
    with account_context(account_a):
        assert balance_get(account=account_a) == a_before
        assert CreditHold.objects.for_account(account_a).get(pk=hold.pk).status == "open"
