"""Billing jobs (django-rq entry points)."""

from __future__ import annotations

import datetime as dt
import logging

import django_rq
from django.conf import settings
from django.db import transaction
from rq import Retry

from accounts.models import Account
from billing.models import BillingSettings, Budget
from billing.selectors import holds_stale
from billing.services import hold_release
from core.tenancy import account_context, dangerously_bypass_tenancy

logger = logging.getLogger("groundwork.billing")


def release_stale_holds() -> int:
    """Release holds left open by a crashed chat after HOLD_TIMEOUT_SECONDS. Idempotent."""
    timeout = dt.timedelta(seconds=settings.HOLD_TIMEOUT_SECONDS)
    with dangerously_bypass_tenancy(reason="billing sweep: find stale holds"):
        stale = list(holds_stale(older_than=timeout).values_list("pk", "account_id"))
    released = 0
    for hold_id, account_id in stale:
        with account_context(account_id=account_id):
            from billing.models import CreditHold

            hold = CreditHold.objects.for_account(account_id).filter(pk=hold_id).first()
            # NOTE: a chat may settle the hold between the scan and here; hold_release
            # re-reads it under lock and does nothing to a closed hold.
            if hold is not None:
                hold_release(hold=hold)
                released += 1
    if released:
        logger.info("released %d stale credit holds", released)
    return released


def enqueue_account_purge(*, account_id: int) -> None:
    transaction.on_commit(
        lambda: django_rq.get_queue("default").enqueue(
            purge_account_budgets, account_id=account_id, retry=Retry(max=3, interval=[10, 30, 90])
        )
    )


def purge_account_budgets(*, account_id: int) -> int:
    """Delete a deleted account's budgets and billing settings (its billing contact is a
    person's address); the ledger and balance are kept. Idempotent; does nothing to an
    account that is not deleted. Returns how many rows it removed."""
    if not Account.objects.filter(pk=account_id, deleted_at__isnull=False).exists():
        logger.warning("budget purge for account %s, which is not deleted: nothing done", account_id)
        return 0
    with account_context(account_id=account_id):
        removed, _ = Budget.objects.for_account(account_id).delete()
        settings_removed, _ = BillingSettings.objects.for_account(account_id).delete()
    return removed + settings_removed
