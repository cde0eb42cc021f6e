"""Per-user and per-account chat rate limits (fixed windows in the shared Redis).

Both windows are counted in one round trip (a pipeline of INCR + EXPIRE per window), not
four: this runs on every chat turn. (EXPIRE without NX, which Redis 6.2, the bundled one,
lacks: a window's key is named by its window, so renewing its expiry is harmless.)"""

from __future__ import annotations

import logging
import threading
import time

import redis
from django.conf import settings

from chat.errors import ChatError
from core.error_codes import CoreErrorCode

logger = logging.getLogger("groundwork.chat")

_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}
_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def _parse(rate: str) -> tuple[int, int]:
    count, _, period = rate.partition("/")
    return int(count), _PERIODS[period.strip().lower()]


def _redis() -> redis.Redis:
    """One client (a thread-safe connection pool) per process and Redis URL."""
    url = settings.CACHES["default"]["LOCATION"]
    client = _clients.get(url)
    if client is None:
        with _lock:
            client = _clients.setdefault(url, redis.Redis.from_url(url))
    return client


def _window_key(key: str, period: int, now: float) -> str:
    return f"{settings.CACHES['default']['KEY_PREFIX']}:chat-rate:{key}:{int(now // period)}"


def check_chat_rate(*, account_id: int, user_id: int | None, api_key_id: int | None) -> None:
    who = f"user:{user_id}" if user_id else f"key:{api_key_id}"
    now = time.time()
    limits = [
        (_window_key(key, period, now), limit, period)
        for key, (limit, period) in (
            (who, _parse(settings.CHAT_RATE_PER_USER)),
            (f"account:{account_id}", _parse(settings.CHAT_RATE_PER_ACCOUNT)),
        )
    ]
    try:
        with _redis().pipeline(transaction=False) as pipe:
            for key, _limit, period in limits:
                pipe.incr(key)
                pipe.expire(key, period + 1)
            counts = pipe.execute()[::2]
    except redis.RedisError as exc:
        # Fail open: a chat turn is paid for from the ledger (PostgreSQL) whatever Redis
        # does, so an unreachable Redis costs this limit, never the answer (docs/operations/reliability.md).
        logger.warning("chat rate limit unavailable (%s): turn allowed", exc)
        return
    for used, (_key, limit, period) in zip(counts, limits):
        if used > limit:
            wait = period - int(now) % period
            raise ChatError(
                CoreErrorCode.RATE_LIMITED, f"Too many messages: please wait {wait} s and try again.", status=429
            )
