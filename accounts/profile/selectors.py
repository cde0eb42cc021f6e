"""Reads for the settings page and the sockets that follow a person's sessions."""

from __future__ import annotations

from importlib import import_module

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.utils.crypto import constant_time_compare

from accounts.models import User


def session_is_signed_in(*, user_id: int, session_key: str | None) -> bool:
    """Whether the stored session `session_key` still signs `user_id` in: it exists, names
    the user, and carries their current session hash (a new password or "Sign out other
    sessions" changes the hash; signing out deletes the session)."""
    if not session_key:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)
    if str(store.get(SESSION_KEY, "")) != str(user_id):
        return False
    user = User.objects.filter(pk=user_id, is_active=True).first()
    return user is not None and constant_time_compare(store.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash())
