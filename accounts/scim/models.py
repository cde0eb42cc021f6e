"""SCIM's rows: the account's provisioning tokens, and one identity per (account, person).

Imported by accounts.models, so they belong to the accounts app and its migrations.
"""

from __future__ import annotations

import uuid

from django.db import models

from accounts.tokens import IssuedSecret
from core.tenancy import TenantModel


class ScimToken(IssuedSecret):
    """An identity provider's bearer token for /scim/v2/. Only a SHA-256 of the secret is
    stored; it is shown once (accounts/tokens.py: the lifecycle it shares with API keys). It
    sees and changes the members of its own account only.

    It belongs to the account and carries its maker's rights: it works only while the owner
    who made it (`created_by`) is still an owner here, and is revoked when they are removed or
    stop being one (accounts/services/members.py), as their invitations are cancelled."""

    SECRET_PREFIX = "gwscim_"
    PREFIX_LENGTH = 12
    HASH_FIELD = "token_hash"
    AUDIT_NAME = "scim_token"
    NOT_FOUND_MESSAGE = "That SCIM token was not found."

    name = models.CharField(max_length=100, default="SCIM token", help_text="What it is for, e.g. the provider.")
    prefix = models.CharField(max_length=16, help_text="The first characters, to recognise a token.")
    token_hash = models.CharField(max_length=64, unique=True)

    class Meta:
        verbose_name = "SCIM token"

    def __str__(self):
        return f"SCIM token ({self.prefix}…)"


class ScimIdentity(TenantModel):
    """A person as this account's identity provider knows them: the SCIM `id` (a random
    UUID per account and person, never the global user id), what the provider said about
    them (kept here, per account: one team's directory never rewrites the person's name or
    login seen by their other teams), and the role to give back on reactivation.

    Active means "is a member now" (the membership is the one truth: a member removed on the
    Team page reads as inactive). Deactivation ends the membership and keeps this row, so the
    same `id` answers and reactivation restores `role`."""

    scim_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user = models.ForeignKey("accounts.User", on_delete=models.CASCADE, related_name="+")
    external_id = models.CharField(max_length=255, blank=True, default="")
    given_name = models.CharField(max_length=150, blank=True, default="")
    family_name = models.CharField(max_length=150, blank=True, default="")
    display_name = models.CharField(max_length=150, blank=True, default="")
    emails = models.JSONField(default=list, blank=True)
    # The role the membership had when it last ended here (however it ended: SCIM, the Team
    # page, the admin), given back on reactivation; member when none was recorded.
    role = models.CharField(max_length=10, default="member")
    # The person came from the identity provider (POST /Users made this identity), rather than
    # joining on the Team page, by invitation or SSO and being matched later. Only such an
    # owner may be deactivated or demoted by a token (accounts/scim/services.py).
    provisioned = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "SCIM identity"
        verbose_name_plural = "SCIM identities"
        constraints = [models.UniqueConstraint(fields=["account", "user"], name="scimidentity_account_user_unique")]

    def __str__(self):
        return f"{self.user} in {self.account_id} (SCIM {self.scim_id})"
