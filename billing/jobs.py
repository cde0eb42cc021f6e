"""Billing jobs (django-rq entry points)."""
from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings

from core.tenancy import account_context, dangerously_bypass_tenancy
from billing.selectors import holds_stale
from billing.services import hold_release

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
