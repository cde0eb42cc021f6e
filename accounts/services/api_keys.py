"""API keys: created (shown once), revoked, touched when used."""
from __future__ import annotations

import secrets
from django.db import transaction
from django.utils import timezone

from accounts.errors import AccountError
from accounts.keys import API_KEY_PREFIX, hash_key
from accounts.models import Account, ApiKey, KeyScope, User
from accounts.permissions import Action
from accounts.signals import principal_access_ended
from audit.services import audit_record
from core import sockets
from core.text import CONTROL_CHARACTERS_MESSAGE, has_control_characters
from accounts.error_codes import AccountErrorCode
from core.error_codes import CoreErrorCode
from accounts.services.members import _require_manager


@transaction.atomic
def api_key_create(*, account: Account, actor: User | None, name: str,
                   scope: str = KeyScope.WRITE) -> tuple[ApiKey, str]:
    """A new key with `scope` read (search and chat) or write (also upload, delete, reindex).
    Returns (key, raw secret); the secret is never stored or shown again. `actor=None` is an
    operator (manage.py create_account), who keeps the write scope every key used to have."""
    if actor is not None:
        _require_manager(account=account, actor=actor, action=Action.KEYS_MANAGE)
    name = (name or "").strip()
    if has_control_characters(name):
        raise AccountError(CoreErrorCode.INVALID_NAME, CONTROL_CHARACTERS_MESSAGE, field="name")
    if not name:
        raise AccountError(CoreErrorCode.INVALID_NAME, "Give the key a name, e.g. the integration that will use it.", field="name")
    if scope not in KeyScope.values:
        raise AccountError(AccountErrorCode.INVALID_SCOPE, "Choose a scope: read (search and chat) or write (also upload, "
                                            "delete and reindex documents).", field="scope")
    raw = API_KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.for_account(account).create(
        account=account, name=name[:100], prefix=raw[:10], key_hash=hash_key(raw), created_by=actor, scope=scope)
    audit_record(account=account, action="key.create", actor=actor, target=f"{key.name} ({key.prefix}…)",
                 detail={"scope": scope})
    return key, raw


@transaction.atomic
def api_key_revoke(*, account: Account, actor: User | None, key_id: int) -> ApiKey:
    """Revoke a key (idempotent): it answers 401 from now on, its access to restricted
    collections goes in the same transaction, and its open sockets close on commit."""
    if actor is not None:
        _require_manager(account=account, actor=actor, action=Action.KEYS_MANAGE)
    key = ApiKey.objects.for_account(account).filter(pk=key_id).first()
    if key is None:
        raise AccountError(CoreErrorCode.NOT_FOUND, "That API key was not found.", status=404)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit_record(account=account, action="key.revoke", actor=actor, target=f"{key.name} ({key.prefix}…)")
        principal_access_ended.send(sender=ApiKey, account_id=account.pk, api_key_id=key.pk)
    # Its open sockets close (4401) once this commits (also on a repeated revoke: a socket
    # that missed the first notice hears the second).
    sockets.notify_on_commit(sockets.key_group(key.pk), sockets.REVOKED)
    return key


def api_key_touch(*, key: ApiKey) -> None:
    """Record use, at most once a minute per key so busy integrations don't write per call."""
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.for_account(key.account_id).filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
