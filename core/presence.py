"""Which web processes are alive: each daphne process refreshes its entry in a Redis sorted
set every few seconds (scored by when it expires, PRESENCE_TTL_SECONDS ahead), so /healthz
can count the processes that serve, on this machine or behind a load balancer, the way rq
counts its workers; a process killed outright drops out when its entry expires."""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
from pathlib import Path

PRESENCE_TTL_SECONDS = 30
REFRESH_SECONDS = 10


def _key() -> str:
    from django.conf import settings

    return f"{settings.CACHES['default']['KEY_PREFIX']}:web-processes"


def _redis():
    import django_rq

    return django_rq.get_connection("default")


def served_by_daphne() -> bool:
    """True in a daphne server process (`daphne …` or `python -m daphne …`), not in tests
    or management commands that merely import the ASGI application."""
    program = Path(sys.argv[0])
    return program.name == "daphne" or program.parent.name == "daphne"


def live_web_processes() -> int:
    return _redis().zcount(_key(), time.time(), "+inf")


def start_heartbeat() -> None:
    """Announce this process until it exits."""
    member = f"{socket.gethostname()}:{os.getpid()}"
    stopped = threading.Event()

    def beat():
        while not stopped.is_set():
            try:
                now = time.time()
                with _redis().pipeline() as pipe:
                    pipe.zadd(_key(), {member: now + PRESENCE_TTL_SECONDS})
                    pipe.zremrangebyscore(_key(), "-inf", now)  # forget the long dead
                    pipe.execute()
            except Exception:  # Redis away for a moment: /healthz reports it; try again later
                pass
            stopped.wait(REFRESH_SECONDS)

    def leave():
        stopped.set()
        try:
            _redis().zrem(_key(), member)
        except Exception:
            pass

    threading.Thread(target=beat, name="web-presence", daemon=True).start()
    atexit.register(leave)
