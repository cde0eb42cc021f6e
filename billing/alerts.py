"""Owners' billing settings (`billing.manage`): the billing contact and the low-balance alert.

The alert is a small state machine on the account's BillingSettings row. Armed, it fires
when a charge (a debit, or a hold settled to what was used) leaves the balance below the
threshold: one email to the billing contact, sent when the transaction commits, the state
"sent" with when, to whom and at what balance, and an audit entry. Further charges send
nothing. A grant that brings the balance back to the threshold or above arms it again.
billing.services calls `low_balance_check` and `low_balance_rearm` under the account's
balance row lock, which every credit movement holds, so two charges crossing together
send one email.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from accounts.permissions import Action, actor_require
from audit.actors import SYSTEM
from audit.services import audit_record
from billing.error_codes import BillingErrorCode
from billing.errors import BillingError
from billing.models import AccountBalance, BillingSettings
from core.error_codes import CoreErrorCode
from core.text import whole_number

logger = logging.getLogger("groundwork.billing")

MAX_THRESHOLD = 10**12
_UNSET = object()


def billing_settings_get(*, account) -> BillingSettings | None:
    """The account's billing settings, or None before an owner first saves them."""
    return BillingSettings.objects.for_account(account).select_related("account").first()


def contact_email_parse(value) -> str:
    """An email address, or "" for none. Refuses anything else (400, naming the field)."""
    text = ("" if value is None else str(value)).strip()
    if not text:
        return ""
    try:
        if len(text) > 254:
            raise ValidationError("too long")
        validate_email(text)
    except ValidationError as exc:
        raise BillingError(
            CoreErrorCode.INVALID_EMAIL,
            f"“{text[:80]}” is not an email address; enter one such as billing@example.com, or leave it empty.",
            field="contact_email",
        ) from exc
    return text


def threshold_parse(value) -> int | None:
    """A whole number of credits from 0 to 1,000,000,000,000 ("5,000" is read as 5000), or None
    (empty: no alert)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    number = whole_number(value, minimum=0, maximum=MAX_THRESHOLD)
    if number is None:
        shown = str(value)[:40]
        reason = "cannot be negative" if str(value).strip().startswith("-") else "must be a whole number of credits"
        raise BillingError(
            BillingErrorCode.INVALID_THRESHOLD,
            f"The low-balance threshold {reason} (from 0 to {MAX_THRESHOLD:,}; "
            f"got {shown!r}). Leave it empty for no alert.",
            field="low_balance_threshold",
        )
    return number


def _owner_require(account, actor) -> None:
    actor_require(account=account, actor=actor, action=Action.BILLING_MANAGE)


@transaction.atomic
def billing_settings_update(*, account, actor, contact_email=_UNSET, low_balance_threshold=_UNSET) -> BillingSettings:
    """Set the billing contact and/or the low-balance threshold (owners only; what is not
    given stays as it was). A changed threshold arms the alert: the next charge that leaves
    the balance below it sends one email. An alert needs a contact to send to."""
    _owner_require(account, actor)
    # The balance row lock orders this after any charge under way (low_balance_check).
    AccountBalance.objects.for_account(account).select_for_update().first()
    current = BillingSettings.objects.for_account(account).select_for_update().first()
    if current is None:
        BillingSettings.objects.for_account(account).bulk_create(
            [BillingSettings(account=account)], ignore_conflicts=True
        )
        current = BillingSettings.objects.for_account(account).select_for_update().get()
    previous = {"contact_email": current.contact_email, "low_balance_threshold": current.low_balance_threshold}
    if contact_email is not _UNSET:
        current.contact_email = contact_email_parse(contact_email)
    if low_balance_threshold is not _UNSET:
        current.low_balance_threshold = threshold_parse(low_balance_threshold)
    if current.low_balance_threshold is not None and not current.contact_email:
        raise BillingError(
            BillingErrorCode.CONTACT_REQUIRED,
            "A low-balance alert needs a billing contact email to send to.",
            field="contact_email",
        )
    if current.low_balance_threshold != previous["low_balance_threshold"]:
        current.alert_armed = True
    current.updated_by = actor if isinstance(actor, get_user_model()) else None
    current.save()
    now = {"contact_email": current.contact_email, "low_balance_threshold": current.low_balance_threshold}
    if now != previous:
        audit_record(
            account=account,
            action="billing.update",
            actor=actor,
            target="billing settings",
            detail={**now, "previous": previous},
        )
    return current


def low_balance_check(balance: AccountBalance) -> None:
    """After a charge, under the balance row lock: fire the armed alert when the balance is
    now below its threshold. One query when there is nothing to do."""
    alert = (
        BillingSettings.objects.for_account(balance.account_id)
        .select_for_update(of=("self",))
        .filter(alert_armed=True, low_balance_threshold__gt=balance.balance)
        .exclude(contact_email="")
        .select_related("account")
        .first()
    )
    if alert is None:
        return
    alert.alert_armed = False
    alert.last_alert_at = timezone.now()
    alert.last_alert_balance = balance.balance
    alert.last_alert_to = alert.contact_email
    alert.save(update_fields=["alert_armed", "last_alert_at", "last_alert_balance", "last_alert_to", "updated_at"])
    audit_record(
        account=balance.account_id,
        action="billing.alert",
        actor=SYSTEM,
        target=alert.contact_email,
        detail={"balance": balance.balance, "threshold": alert.low_balance_threshold},
    )
    subject = f"{alert.account.name}: {balance.balance:,} credits left on Groundwork"
    body = (
        f"The credit balance of {alert.account.name} is {balance.balance:,} credits, below the "
        f"low-balance alert of {alert.low_balance_threshold:,} that an owner set.\n\n"
        "Documents stop being indexed and chat stops answering when credits run out. Ask support "
        "to add credits; this alert is sent once and is armed again when the balance is back "
        f"at {alert.low_balance_threshold:,} or more.\n"
    )
    to = alert.contact_email
    transaction.on_commit(lambda: _send(subject, body, to))


def _send(subject: str, body: str, to: str) -> None:
    # NOTE: a mail server that is down must not fail the charge that already committed; the
    # alert stays recorded as sent (page, audit log) and the failure is logged.
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [to])
    except Exception:  # any transport error
        logger.exception("low-balance alert to %s could not be sent", to)


def low_balance_rearm(balance: AccountBalance) -> None:
    """After a grant, under the balance row lock: arm a sent alert again once the balance is
    back at its threshold or above."""
    BillingSettings.objects.for_account(balance.account_id).filter(
        alert_armed=False, low_balance_threshold__lte=balance.balance
    ).update(alert_armed=True, updated_at=timezone.now())
