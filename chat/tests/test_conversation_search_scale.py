"""GET conversations/?q= at scale: one person's 5,000 messages among the
account's 50,000, with the statistics PostgreSQL keeps in production (ANALYZE as the owner).
The search reads only the person's own messages, by the conversation index: no text index
is needed (measured here: about 20 ms on two shared cores)."""

import time

import pytest

from accounts.tests.factories import add_member
from chat.models import Conversation, Message
from chat.selectors import conversation_list
from core.db_owner import owner_connection
from core.tenancy import account_context

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_search_reads_the_persons_messages_not_the_accounts(account_a, owner_a):
    teammate, rows = add_member(account_a), []
    with account_context(account_a):
        for person, count in ((owner_a, 100), (teammate, 900)):
            for i in range(count):
                conversation = Conversation.objects.for_account(account_a).create(
                    account=account_a, user=person, title=f"Conversation {i}"
                )
                rows += [
                    Message(
                        account=account_a,
                        conversation=conversation,
                        role="user",
                        content=("zanzibar " if (i, j) == (17, 3) else "") + "holiday policy words " * 20,
                    )
                    for j in range(50)
                ]
        Message.objects.for_account(account_a).bulk_create(rows, batch_size=5000)
    with owner_connection() as conn:
        conn.execute("ANALYZE chat_message")
        conn.execute("ANALYZE chat_conversation")
    with account_context(account_a):
        for q, found in (("zanzibar", 1), ("HOLIDAY", 25), ("nothing-at-all", 0)):
            started = time.monotonic()
            assert len(list(conversation_list(account=account_a, user=owner_a, q=q)[:25])) == found
            assert time.monotonic() - started < 1, q  # ~20 ms here; 1 s leaves room for a loaded machine
        plan = conversation_list(account=account_a, user=owner_a, q="zanzibar")[:25].explain()
    # The messages are reached through the person's conversations, never scanned account-wide.
    assert "chat_message_conversation_id" in plan and "chat_message_account_id" not in plan, plan
