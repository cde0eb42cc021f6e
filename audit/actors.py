"""Who is acting: the request's user, API key or support staff, kept in a ContextVar for the
length of the request so services that are not handed an actor can still name one."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass

from audit.models import ActorKind


@dataclass(frozen=True)
class Actor:
    kind: str
    id: int | None = None
    label: str = ""


SYSTEM = Actor(ActorKind.SYSTEM)
_current: ContextVar[Actor | None] = ContextVar("groundwork_audit_actor", default=None)


def user_actor(user, *, staff: bool = False) -> Actor:
    return Actor(ActorKind.STAFF if staff else ActorKind.USER, user.pk, user.email)


def key_actor(key) -> Actor:
    return Actor(ActorKind.KEY, key.pk, f"{key.name} ({key.prefix}…)")


def actor_from_request(request) -> Actor | None:
    key = getattr(request, "api_key", None)
    if key is not None:
        return key_actor(key)
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return user_actor(user, staff=request.path.startswith("/admin/") and user.is_staff)


def current_actor() -> Actor | None:
    return _current.get()


@contextlib.contextmanager
def acting_as(actor: Actor | None):
    token = _current.set(actor)
    try:
        yield actor
    finally:
        _current.reset(token)


def resolve(actor) -> Actor:
    """An Actor from what a service was given: an Actor, an ApiKey, a User, or nothing (the
    request's actor, else the system). A user acting through the admin is staff."""
    current = current_actor()
    if isinstance(actor, Actor):
        return actor
    if actor is not None and hasattr(actor, "key_hash"):
        return key_actor(actor)
    if actor is not None and getattr(actor, "is_authenticated", False):
        if current is not None and current.kind == ActorKind.STAFF and current.id == actor.pk:
            return current
        return user_actor(actor)
    return current or SYSTEM
