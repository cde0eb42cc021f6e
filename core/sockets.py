"""Open websockets, per principal: the channel groups a socket joins, the notices that close
or re-authorise them, and the cap on how many a principal may hold open.

A principal is an API key or a member (a person in one account). Each open socket joins
its principal's group and its account's group; a write that takes access away (revoking a
key, removing a member, changing a role, deleting an account) sends the group a notice
when its transaction commits. The notice is the fast path; every chat message also
re-checks its principal before it retrieves or spends (chat/consumers.py), so a lost
notice (Redis down, a race with the handshake) costs at most one refused message.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

logger = logging.getLogger("groundwork.sockets")

# Message types a consumer handles (Channels calls `principal_revoked` / `principal_changed`).
REVOKED = "principal.revoked"  # close at once: 4401
CHANGED = "principal.changed"  # re-read the principal: close if it may no longer chat, else carry on
CONVERSATION_DELETED = "conversation.deleted"  # the page closes it, a turn in it stops; the socket stays


def key_group(key_id: int) -> str:
    return f"key-{key_id}"


def member_group(account_id: int, user_id: int) -> str:
    return f"member-{account_id}-{user_id}"


def account_group(account_id: int) -> str:
    return f"account-{account_id}"


def notify_on_commit(group: str, kind: str, reason: str = "") -> None:
    """Tell every open socket in `group` once the current transaction commits (at once
    outside one). Never raises: the write it follows has already happened."""
    transaction.on_commit(lambda: _send(group, {"type": kind, "reason": reason}))


def conversation_deleted_on_commit(group: str, conversation_id: int) -> None:
    """Tell the principal's open sockets (`group`) that one of its conversations was deleted,
    once the current transaction commits."""
    transaction.on_commit(lambda: _send(group, {"type": CONVERSATION_DELETED, "conversation_id": conversation_id}))


def account_sockets_close_on_commit(account_id: int) -> None:
    """Every open socket of the account (keys and members) closes with 4401 once the current
    transaction commits: for whatever deletes or suspends an account."""
    notify_on_commit(account_group(account_id), REVOKED)


def _send(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:  # called on an event loop's own thread: send from that loop, don't block it
        asyncio.ensure_future(_send_async(layer, group, message))
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        logger.warning(
            "could not notify sockets of %s (%s); their next message re-checks", group, message["type"], exc_info=True
        )


async def _send_async(layer, group: str, message: dict) -> None:
    try:
        await layer.group_send(group, message)
    except Exception:
        logger.warning("could not notify sockets of %s", group, exc_info=True)


# --- the cap on open sockets per principal --------------------------------------------------

# A socket holds a lease in a Redis sorted set per principal (member: its channel name,
# score: when the lease ends), renewed while it is open. A web process that dies without
# closing its sockets leaves leases that run out on their own instead of a counter that
# stays up forever.
LEASE_SECONDS = 90
RENEW_EVERY = 30

_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _redis():
    """One asyncio Redis client per event loop (a client belongs to the loop it first ran on)."""
    import redis.asyncio as aioredis

    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = aioredis.from_url(settings.REDIS_URL)
    return client


def _lease_key(principal: str) -> str:
    return f"{settings.CHANNEL_LAYERS['default']['CONFIG'].get('prefix', 'groundwork')}:ws-sockets:{principal}"


class SocketLease:
    """This socket's place among its principal's open sockets."""

    def __init__(self, principal: str, socket_id: str):
        self.key = _lease_key(principal)
        self.socket_id = socket_id
        self._renewer: asyncio.Task | None = None

    async def acquire(self, limit: int) -> bool:
        """Take a place if the principal holds fewer than `limit` (True), else none (False).
        If Redis cannot be reached the socket is let in: the cap guards against abuse, it
        must not lock every member out when Redis blips."""
        now = time.time()
        try:
            async with _redis().pipeline(transaction=True) as pipe:
                pipe.zremrangebyscore(self.key, "-inf", now)
                pipe.zadd(self.key, {self.socket_id: now + LEASE_SECONDS})
                pipe.zcard(self.key)
                pipe.expire(self.key, LEASE_SECONDS)
                _, _, count, _ = await pipe.execute()
            if count > limit:
                await _redis().zrem(self.key, self.socket_id)
                return False
        except Exception:
            logger.warning("socket cap unavailable (Redis); letting %s in", self.key, exc_info=True)
            return True
        self._renewer = asyncio.ensure_future(self._renew())
        return True

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY)
            try:
                await _redis().zadd(self.key, {self.socket_id: time.time() + LEASE_SECONDS})
                await _redis().expire(self.key, LEASE_SECONDS)
            except Exception:
                logger.warning("could not renew socket lease %s", self.key, exc_info=True)

    async def release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None
        try:
            await _redis().zrem(self.key, self.socket_id)
        except Exception:
            logger.warning("could not release socket lease %s (it runs out by itself)", self.key, exc_info=True)


def open_sockets_count() -> int:
    """Open websockets across every web process: the unexpired leases in Redis (for
    /metrics; a process that died leaves leases that stop counting within LEASE_SECONDS)."""
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
    try:
        now, total = time.time(), 0
        for key in client.scan_iter(match=_lease_key("*"), count=500):
            total += client.zcount(key, now, "+inf")
        return total
    finally:
        client.close()


class FrameBucket:
    """Frames per second for one socket: a token bucket of `burst` frames that refills at
    `rate` a second."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.burst = rate, burst
        self.tokens = float(burst)
        self.at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True
