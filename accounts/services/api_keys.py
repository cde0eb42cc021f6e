"""API keys: created (shown once), revoked, touched when used."""

from __future__ import annotations

from django.db import transaction

from accounts.error_codes import AccountErrorCode
from accounts.errors import AccountError
from accounts.models import Account, ApiKey, KeyScope, User
from accounts.permissions import Action
from accounts.services.members import _require_manager
from accounts.signals import principal_access_ended
from accounts.tokens import secret_access_by_id, secret_issue, secret_revoke, secret_touch
from core import sockets
from core.error_codes import CoreErrorCode
from core.text import CONTROL_CHARACTERS_MESSAGE, has_control_characters


@transaction.atomic
def api_key_create(
    *, account: Account, actor: User | None, name: str, scope: str = KeyScope.WRITE
) -> tuple[ApiKey, str]:
    """A new key with `scope` read (search and chat) or write (also upload, delete, reindex).
    Returns (key, raw secret); the secret is never stored or shown again. `actor=None` is an
    operator (manage.py create_account), who keeps the write scope every key used to have."""
    if actor is not None:
        _require_manager(account=account, actor=actor, action=Action.KEYS_MANAGE)
    name = (name or "").strip()
    if has_control_characters(name):
        raise AccountError(CoreErrorCode.INVALID_NAME, CONTROL_CHARACTERS_MESSAGE, field="name")
    if not name:
        raise AccountError(
            CoreErrorCode.INVALID_NAME, "Give the key a name, e.g. the integration that will use it.", field="name"
        )
    if scope not in KeyScope.values:
        raise AccountError(
            AccountErrorCode.INVALID_SCOPE,
            "Choose a scope: read (search and chat) or write (also upload, delete and reindex documents).",
            field="scope",
        )
    return secret_issue(ApiKey, account=account, actor=actor, detail={"scope": scope}, name=name[:100], scope=scope)


@transaction.atomic
def api_key_revoke(*, account: Account, actor: User | None, key_id: int) -> ApiKey:
    """Revoke a key (idempotent): it answers 401 from now on, its access to restricted
    collections goes in the same transaction, and its open sockets close on commit."""
    if actor is not None:
        _require_manager(account=account, actor=actor, action=Action.KEYS_MANAGE)
    key = secret_access_by_id(ApiKey, account=account, secret_id=key_id)
    if secret_revoke(key, account=account, actor=actor):
        principal_access_ended.send(sender=ApiKey, account_id=account.pk, api_key_id=key.pk)
    # Its open sockets close (4401) once this commits (also on a repeated revoke: a socket
    # that missed the first notice hears the second).
    sockets.notify_on_commit(sockets.key_group(key.pk), sockets.REVOKED)
    return key


def api_key_touch(*, key: ApiKey) -> None:
    """Record use, at most once a minute per key so busy integrations don't write per call."""
    secret_touch(key)
