"""Reads of the account's verified domains."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.domains.models import VerifiedDomain


def domain_list(*, account) -> QuerySet[VerifiedDomain]:
    """The account's domains, verified or waiting for their link, by name."""
    return VerifiedDomain.objects.for_account(account).select_related("created_by").order_by("domain")


def domain_is_verified_for(*, account, email: str) -> bool:
    """Whether the address's domain is one the account verified (exactly: a subdomain is
    another domain)."""
    domain = email.rpartition("@")[2].strip().lower()
    return bool(domain) and domain_list(account=account).filter(domain=domain, verified_at__isnull=False).exists()
