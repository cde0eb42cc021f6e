"""django-rq entry points for chat."""

from __future__ import annotations

import logging

import django_rq
from django.db import transaction
from rq import Retry

from accounts.models import Account
from chat.models import Conversation, Message
from core.tenancy import account_context

logger = logging.getLogger("groundwork.chat")

PURGE_BATCH = 500


def enqueue_account_purge(*, account_id: int) -> None:
    transaction.on_commit(
        lambda: django_rq.get_queue("default").enqueue(
            purge_account, account_id=account_id, retry=Retry(max=3, interval=[10, 30, 90])
        )
    )


def account_conversations_purge(sender, *, account, **_signal) -> None:
    """Receiver of accounts.signals.account_deleted: the conversations go in a job."""
    enqueue_account_purge(account_id=account.pk)


def purge_account(*, account_id: int) -> int:
    """Delete a deleted account's conversations and messages, in batches (each its own
    transaction, so a purge that stops half way resumes). Idempotent; does nothing to an
    account that is not deleted. Returns how many conversations this run removed."""
    if not Account.objects.filter(pk=account_id, deleted_at__isnull=False).exists():
        logger.warning("conversation purge for account %s, which is not deleted: nothing done", account_id)
        return 0
    removed = 0
    while True:
        with account_context(account_id=account_id):
            ids = list(
                Conversation.objects.for_account(account_id).order_by("pk").values_list("pk", flat=True)[:PURGE_BATCH]
            )
            if not ids:
                return removed
            Message.objects.for_account(account_id).filter(conversation_id__in=ids).delete()
            Conversation.objects.for_account(account_id).filter(pk__in=ids).delete()
            removed += len(ids)
