"""Slowing online guessing: attempt limits per IP address and per email address.

Login (the dashboard's and the admin's), password reset and sign-up count attempts in fixed
windows in the shared cache (Redis), so every web process sees the same counts. Past a
limit, every attempt in the window is refused, the right password included, with the time
to wait. Why not django-axes: it only watches failed authentications (not password reset
or sign-up), needs its backend first in AUTHENTICATION_BACKENDS (which changes
`authenticate()` for every caller) and its own tables; this is one small module over the
cache that is already there, on the same pattern as chat.ratelimit.

Rates are settings like "5/15min" (count / [n] s|min|h|d); identifiers are hashed in keys.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from redis.exceptions import RedisError

logger = logging.getLogger("groundwork.accounts")

_PERIODS = {"s": 1, "min": 60, "h": 3600, "d": 86400}
# While the cache (Redis) cannot be reached, attempts cannot be counted, so they are refused
# (fail closed: guessing must not get easier when Redis is down), with this wait.
UNAVAILABLE_WAIT_SECONDS = 60


class Wait(int):
    """Seconds to wait; `unavailable`: not a limit reached, the counts could not be read."""

    unavailable = False


def _unavailable_wait() -> Wait:
    wait = Wait(UNAVAILABLE_WAIT_SECONDS)
    wait.unavailable = True
    return wait


_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|min|h|d)\s*$")
_GENERATION_KEY = "rl:generation"


def parse_rate(rate: str) -> tuple[int, int]:
    """ "5/15min" -> (5, 900)."""
    match = _RATE.match(rate or "")
    if not match:
        raise ValueError(f"A rate looks like '5/15min' (count / [n] s|min|h|d), not {rate!r}")
    count, n, unit = match.groups()
    return int(count), (int(n) if n else 1) * _PERIODS[unit]


@dataclass(frozen=True)
class Limit:
    scope: str  # what is counted, e.g. "login-email"
    identifier: str  # whose attempts: an IP address or a lower-cased email
    rate: str  # the setting's value

    def _key(self) -> tuple[str, int]:
        _, period = parse_rate(self.rate)
        window = int(time.time() // period)
        digest = hashlib.sha256(self.identifier.strip().lower().encode()).hexdigest()[:32]
        return f"rl:{_generation()}:{self.scope}:{digest}:{period}:{window}", period

    def wait_seconds(self) -> int:
        """Seconds until attempts are allowed again; 0 when under the limit."""
        count, period = parse_rate(self.rate)
        key, _ = self._key()
        if (cache.get(key) or 0) < count:
            return 0
        return period - int(time.time()) % period

    def hit(self) -> None:
        try:
            key, period = self._key()
            cache.add(key, 0, timeout=period + 1)
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr: this attempt starts a new window
                cache.add(key, 1, timeout=period + 1)
        except RedisError as exc:  # the cache went away after wait_for() read it
            logger.warning("could not count a %s attempt: the cache is unreachable (%s)", self.scope, exc)

    def clear(self) -> None:
        try:
            cache.delete(self._key()[0])
        except RedisError as exc:
            logger.warning("could not clear the %s count: the cache is unreachable (%s)", self.scope, exc)


def _generation() -> int:
    return cache.get_or_set(_GENERATION_KEY, 1, timeout=None)


def reset_all() -> None:
    """Forget every count (an operator unlocking everyone; tests start from zero)."""
    cache.add(_GENERATION_KEY, 1, timeout=None)
    cache.incr(_GENERATION_KEY)


def wait_for(limits: list[Limit]) -> int:
    """Seconds until every limit allows an attempt (0: now). The cache unreachable: refused
    for UNAVAILABLE_WAIT_SECONDS (a `Wait` whose `unavailable` is set; docs/operations/reliability.md)."""
    try:
        return max((limit.wait_seconds() for limit in limits), default=0)
    except RedisError as exc:  # redis-py's ConnectionError / TimeoutError, through Django's cache
        logger.warning(
            "attempt limits unavailable (%s): refusing %s for now",
            exc,
            ", ".join(sorted({limit.scope for limit in limits})),
        )
        return _unavailable_wait()


def client_ip(request) -> str:
    """The client's address. Behind RATE_LIMIT_PROXY_COUNT trusted proxies, the address the
    nearest of them saw (from the right of X-Forwarded-For: the left part is the client's to forge)."""
    proxies = settings.RATE_LIMIT_PROXY_COUNT
    if proxies:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if len(forwarded) >= proxies:
            return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR") or "unknown"


def try_again_in(wait: int) -> str:
    minutes = max(1, math.ceil(wait / 60))
    return f"try again in {minutes} minute{'s' if minutes != 1 else ''}"


def too_many_message(wait: int) -> str:
    if getattr(wait, "unavailable", False):
        return (
            "Groundwork cannot check sign-in attempts right now (its cache is unreachable), so it is "
            f"refusing them for a moment: {try_again_in(wait)}."
        )
    return f"Too many attempts: {try_again_in(wait)}."


def login_limits(request, email: str) -> list[Limit]:
    return [
        Limit("login-email", email or "", settings.LOGIN_FAILURES_PER_EMAIL),
        Limit("login-ip", client_ip(request), settings.LOGIN_FAILURES_PER_IP),
    ]


def password_reset_limits(request, email: str) -> list[Limit]:
    return [
        Limit("reset-email", email or "", settings.PASSWORD_RESETS_PER_EMAIL),
        Limit("reset-ip", client_ip(request), settings.PASSWORD_RESETS_PER_IP),
    ]


def signup_limits(request, email: str) -> list[Limit]:
    return [
        Limit("signup-email", email or "", settings.SIGNUPS_PER_EMAIL),
        Limit("signup-ip", client_ip(request), settings.SIGNUPS_PER_IP),
    ]


def invitation_limits(inviter, email: str) -> list[Limit]:
    return [
        Limit("invite-inviter", str(inviter.pk), settings.INVITATIONS_PER_INVITER),
        Limit("invite-address", email or "", settings.INVITATIONS_PER_ADDRESS),
    ]


def verification_email_limits(user) -> list[Limit]:
    return [Limit("verify-resend", str(user.pk), settings.VERIFICATION_EMAILS_PER_USER)]
