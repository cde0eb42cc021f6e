"""Writes to the account's verified domains: asked for by an owner, verified by the link
emailed to admin@ or postmaster@ of the domain, removed by an owner. Audited."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core import signing
from django.core.exceptions import ValidationError
from django.core.validators import DomainNameValidator
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from accounts import ratelimit
from accounts.domains.models import VerificationMailbox, VerifiedDomain
from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.keys import hash_key
from accounts.models import Account, User
from accounts.permissions import Action
from accounts.services.members import _require_manager
from accounts.services.verification import _send_mail
from audit.actors import Actor
from audit.models import ActorKind
from audit.services import audit_record
from core.error_codes import CoreErrorCode
from core.tenancy import account_context

DOMAIN_SALT = "accounts.verify-domain"
_validate_domain = DomainNameValidator(accept_idna=False)


def _clean_domain(domain: str) -> str:
    domain = (domain or "").strip().lower().rstrip(".")
    if domain.startswith("@"):
        domain = domain[1:]
    try:
        _validate_domain(domain)
    except ValidationError as exc:
        raise AccountError(
            AccountErrorCode.INVALID_DOMAIN,
            f"{domain or 'That'} is not a domain name (e.g. example.com).",
            field="domain",
        ) from exc
    if "." not in domain:
        raise AccountError(
            AccountErrorCode.INVALID_DOMAIN, "A domain has at least two parts (e.g. example.com).", field="domain"
        )
    return domain


@transaction.atomic
def domain_verification_send(
    *, account: Account, actor: User, domain: str, mailbox: str, site_url: str
) -> VerifiedDomain:
    """Owners: email `mailbox`@`domain` a link that verifies the domain for this account
    (again for a domain still waiting: only the newest link works). Limited per account
    (VERIFICATION_EMAILS_PER_USER)."""
    _require_manager(account=account, actor=actor, action=Action.DOMAINS_MANAGE)
    domain = _clean_domain(domain)
    if mailbox not in VerificationMailbox.values:
        raise AccountError(
            AccountErrorCode.INVALID_DOMAIN,
            "Choose where the link goes: admin@ or postmaster@ of the domain.",
            field="mailbox",
        )
    limit = ratelimit.Limit("domain-verification", str(account.pk), settings.VERIFICATION_EMAILS_PER_USER)
    wait = limit.wait_seconds()
    if wait:
        raise AccountError(
            CoreErrorCode.RATE_LIMITED,
            f"Too many verification links were sent: {ratelimit.try_again_in(wait)}.",
            status=429,
            field="domain",
        )
    row, _ = (
        VerifiedDomain.objects.for_account(account)
        .select_for_update()
        .get_or_create(account=account, domain=domain, defaults={"mailbox": mailbox, "created_by": actor})
    )
    if row.verified_at is not None:
        raise AccountError(AccountErrorCode.DOMAIN_VERIFIED, f"{domain} is verified already.", field="domain")
    limit.hit()
    secret = secrets.token_urlsafe(32)
    row.mailbox, row.token_hash, row.created_by = mailbox, hash_key(secret), actor
    row.save(update_fields=["mailbox", "token_hash", "created_by"])
    token = signing.dumps({"a": account.pk, "d": row.pk, "n": secret}, salt=DOMAIN_SALT)
    _send_mail(
        to=row.verification_address,
        template="accounts/email/verify_domain.txt",
        context={
            "account": account,
            "actor": actor,
            "domain": domain,
            "link": site_url.rstrip("/") + reverse("accounts:domain-verify", args=[token]),
        },
    )
    audit_record(
        account=account,
        action="domain.verification_sent",
        actor=actor,
        target=domain,
        detail={"to": row.verification_address},
    )
    return row


def _invalid() -> AccountError:
    return AccountError(
        AccountErrorCode.LINK_INVALID,
        "This verification link is not valid: it was used, replaced by a newer one, or copied incompletely.",
        status=404,
    )


def domain_for_token(*, token: str) -> VerifiedDomain:
    """The waiting domain a link names (its own account's context), or 404 link_invalid."""
    try:
        data = signing.loads(token, salt=DOMAIN_SALT, max_age=settings.EMAIL_VERIFICATION_MAX_AGE_DAYS * 86400)
        account_id, domain_id, secret = int(data["a"]), int(data["d"]), str(data["n"])
    except (signing.BadSignature, KeyError, TypeError, ValueError) as exc:
        raise _invalid() from exc
    with account_context(account_id=account_id):
        row = (
            VerifiedDomain.objects.for_account(account_id)
            .select_related("account")
            .filter(pk=domain_id, verified_at__isnull=True)
            .first()
        )
    if (
        row is None
        or not row.token_hash
        or not secrets.compare_digest(row.token_hash, hash_key(secret))
        or row.account.deleted_at is not None
    ):
        raise _invalid()
    return row


@transaction.atomic
def domain_verify(*, token: str) -> VerifiedDomain:
    """Open the link (a POST from its page: mail scanners only GET): the domain is verified
    for the account, once."""
    found = domain_for_token(token=token)
    with account_context(account_id=found.account_id):
        row = VerifiedDomain.objects.for_account(found.account_id).select_for_update().get(pk=found.pk)
        if row.verified_at is not None or row.token_hash != found.token_hash:
            raise _invalid()  # NOTE: two clicks at once: the row lock lets one verify
        row.verified_at, row.token_hash = timezone.now(), ""
        row.save(update_fields=["verified_at", "token_hash"])
        audit_record(
            account=row.account_id,
            action="domain.verify",
            target=row.domain,
            actor=Actor(ActorKind.SYSTEM, None, f"the link sent to {row.verification_address}"),
        )
    return row


@transaction.atomic
def domain_remove(*, account: Account, actor: User, domain_id: int) -> None:
    """Owners: the domain is no longer verified here (people already added stay)."""
    _require_manager(account=account, actor=actor, action=Action.DOMAINS_MANAGE)
    row = VerifiedDomain.objects.for_account(account).filter(pk=domain_id).first()
    if row is None:
        raise AccountError(CoreErrorCode.NOT_FOUND, "That domain was not found.", status=404)
    row.delete()
    audit_record(account=account, action="domain.remove", actor=actor, target=row.domain)
