"""The account's verified domains (imported by accounts.models: the accounts app's models)."""

from __future__ import annotations

from django.db import models

from core.tenancy import TenantModel


class VerificationMailbox(models.TextChoices):
    ADMIN = "admin", "admin@"
    POSTMASTER = "postmaster", "postmaster@"


class VerifiedDomain(TenantModel):
    """A mail domain an owner asked to verify; verified once the link sent to `mailbox`@domain
    was opened (`verified_at`). Only a SHA-256 of the link's secret is kept, cleared once used."""

    domain = models.CharField(max_length=253)
    mailbox = models.CharField(max_length=12, choices=VerificationMailbox.choices)
    token_hash = models.CharField(max_length=64, blank=True, default="")
    created_by = models.ForeignKey("accounts.User", null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    verified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "domain"], name="verifieddomain_account_domain_unique")
        ]

    def __str__(self):
        return f"{self.domain} ({'verified' if self.verified_at else 'pending'}) in {self.account_id}"

    @property
    def verification_address(self) -> str:
        return f"{self.mailbox}@{self.domain}"
