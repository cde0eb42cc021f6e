"""One lifecycle for the account's bearer secrets (API keys, SCIM tokens): issued with a
random secret shown once and stored only as its SHA-256 (accounts/keys.py), recognised by a
visible prefix, looked up by that hash and compared in constant time, stamped when used,
revoked for good, every issue and revocation audited.

A kind of secret is a model inheriting `IssuedSecret` that names its own spelling: the
start of its secrets (`SECRET_PREFIX`), how many characters stay visible
(`PREFIX_LENGTH`), the column holding the hash (`HASH_FIELD`), its audit actions
(`AUDIT_NAME` + ".create" / ".revoke") and what "not found" says (`NOT_FOUND_MESSAGE`).
"""

from __future__ import annotations

import secrets
from typing import ClassVar, TypeVar

from django.db import models
from django.utils import timezone

from accounts.errors import AccountError
from accounts.keys import hash_key
from audit.services import audit_record
from core import rows
from core.error_codes import CoreErrorCode
from core.tenancy import TenantModel, api_key_context

# A presented secret longer than this is not one of ours (nothing is hashed for it).
SECRET_MAX_LENGTH = 200
# Use is recorded at most this often per secret, so a busy integration does not write per call.
TOUCH_EVERY_SECONDS = 60


class IssuedSecret(TenantModel):
    """What every issued secret has beside its name and hash: who made it and when, when it
    was last used, when it was revoked (never un-revoked)."""

    SECRET_PREFIX: ClassVar[str]
    PREFIX_LENGTH: ClassVar[int]
    HASH_FIELD: ClassVar[str]
    AUDIT_NAME: ClassVar[str]
    NOT_FOUND_MESSAGE: ClassVar[str]

    created_by = models.ForeignKey("accounts.User", null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta(TenantModel.Meta):
        abstract = True

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @property
    def label(self) -> str:
        """How the audit log and the pages name it: its name and visible prefix."""
        return f"{self.name} ({self.prefix}…)"


Secret = TypeVar("Secret", bound=IssuedSecret)


def secret_issue(model: type[Secret], *, account, actor, detail: dict | None = None, **fields) -> tuple[Secret, str]:
    """A new active secret of `model` in `account` (`fields`: its name and what else the
    kind stores), audited as `<AUDIT_NAME>.create`. Returns (row, raw secret): the raw
    secret is never stored or shown again. Runs in the caller's transaction."""
    raw = model.SECRET_PREFIX + secrets.token_urlsafe(32)
    row = model.objects.for_account(account).create(
        account=account,
        prefix=raw[: model.PREFIX_LENGTH],
        created_by=actor,
        **{model.HASH_FIELD: hash_key(raw)},
        **fields,
    )
    audit_record(account=account, action=f"{model.AUDIT_NAME}.create", actor=actor, target=row.label, detail=detail)
    return row, raw


def secret_authenticate(model: type[Secret], *, raw: str | None) -> Secret | None:
    """The active secret of `model` a caller presented, with its account and maker loaded,
    or None: not of this kind, unknown, revoked, or its account deleted. Row-level security
    shows only the row whose hash is computed here (the `*_by_hash` policies), so the lookup
    needs no account; the stored hash is then compared in constant time."""
    if not raw or not raw.startswith(model.SECRET_PREFIX) or len(raw) > SECRET_MAX_LENGTH:
        return None
    digest = hash_key(raw)
    column = model._meta.get_field(model.HASH_FIELD).column
    with api_key_context(digest):
        # Every API request, socket handshake and SCIM call asks: one statement built once
        # (core.rows), with the account and maker joined as select_related would.
        row = rows.select_one(
            model,
            f"WHERE t.{column} = %s AND t.revoked_at IS NULL AND account.deleted_at IS NULL ORDER BY t.id",
            [digest],
            related=("account", "created_by"),
        )
    if row is None or not secrets.compare_digest(getattr(row, model.HASH_FIELD), digest):
        return None
    return row


def secret_access_by_id(model: type[Secret], *, account, secret_id) -> Secret:
    """The account's secret of `model` with this id, revoked or not; another account's or a
    missing one raises the same 404."""
    row = model.objects.for_account(account).filter(pk=secret_id).first()
    if row is None:
        raise AccountError(CoreErrorCode.NOT_FOUND, model.NOT_FOUND_MESSAGE, status=404)
    return row


def secret_revoke(secret: IssuedSecret, *, account, actor, detail: dict | None = None) -> bool:
    """Revoke `secret` for good, audited as `<AUDIT_NAME>.revoke`; idempotent: False (and no
    audit entry) when it already was. Runs in the caller's transaction."""
    if secret.revoked_at is not None:
        return False
    secret.revoked_at = timezone.now()
    secret.save(update_fields=["revoked_at"])
    audit_record(account=account, action=f"{secret.AUDIT_NAME}.revoke", actor=actor, target=secret.label, detail=detail)
    return True


def secret_touch(secret: IssuedSecret) -> None:
    """Record use, at most once a minute per secret (in the secret's account context)."""
    now = timezone.now()
    if secret.last_used_at is None or (now - secret.last_used_at).total_seconds() > TOUCH_EVERY_SECONDS:
        type(secret).objects.for_account(secret.account_id).filter(pk=secret.pk).update(last_used_at=now)
        secret.last_used_at = now
