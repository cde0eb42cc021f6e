"""Per-user and per-account chat rate limits (fixed windows in the shared cache/Redis)."""
from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache

from chat.errors import ChatError

_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def _parse(rate: str) -> tuple[int, int]:
    count, _, period = rate.partition("/")
    return int(count), _PERIODS[period.strip().lower()]


def _hit(key: str, rate: str) -> int | None:
    """Count one use; return seconds to wait when over the limit, else None."""
    limit, period = _parse(rate)
    window = int(time.time() // period)
    cache_key = f"chat-rate:{key}:{window}"
    cache.add(cache_key, 0, timeout=period + 1)
    used = cache.incr(cache_key)
    if used > limit:
        return period - int(time.time()) % period
    return None


def check_chat_rate(*, account_id: int, user_id: int | None, api_key_id: int | None) -> None:
    who = f"user:{user_id}" if user_id else f"key:{api_key_id}"
    for key, rate in ((who, settings.CHAT_RATE_PER_USER), (f"account:{account_id}", settings.CHAT_RATE_PER_ACCOUNT)):
        wait = _hit(key, rate)
        if wait is not None:
            raise ChatError("rate_limited", f"Too many messages: please wait {wait} s and try again.", status=429)
