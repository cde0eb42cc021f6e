"""A request id on every log line of a request, and of the jobs and the websocket turn it
starts (docs/operations/metrics.md, "Logs and request ids").

An HTTP request takes the id from its `X-Request-ID` header (letters, digits, `.`, `_`,
`-`, `:`, at most 128) or is given a new one; the response carries it back in
`X-Request-ID`. A job enqueued while the id is set keeps it in its rq meta
(`job.meta["request_id"]`), and the job's own log lines carry it. A websocket chat turn has
an id of its own (the socket's `X-Request-ID` at the handshake, or a new one, then
`:<n>` for the n-th turn).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import uuid

from django_rq.queues import DjangoRQ

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("groundwork_request_id", default=None)
_VALID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
HEADER = "X-Request-ID"


def new_request_id() -> str:
    return uuid.uuid4().hex


def request_id_from(header: str | None) -> str:
    """The client's id when it is a plain token, else a new one (never a client's log injection)."""
    if header and _VALID.fullmatch(header):
        return header
    return new_request_id()


def current_request_id() -> str | None:
    """The id of the request (or job, or turn) being served here; in a job, its meta's."""
    value = _current.get()
    if value is not None:
        return value
    return _job_request_id()


@contextlib.contextmanager
def request_id_set(value: str):
    token = _current.set(value)
    try:
        yield value
    finally:
        _current.reset(token)


def _job_request_id() -> str | None:
    try:
        from rq import get_current_job

        job = get_current_job()
    except Exception:  # no Redis connection in this process, or not in a job
        return None
    if job is None:
        return None
    return (job.meta or {}).get("request_id")


class RequestIdMiddleware:
    """First in MIDDLEWARE: everything after it, and the response, has the id."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        value = request_id_from(request.headers.get(HEADER))
        request.request_id = value
        with request_id_set(value):
            response = self.get_response(request)
        response[HEADER] = value
        return response


class RequestIdFilter(logging.Filter):
    """Adds `record.request_id` (None outside a request, job or turn) for the formatters."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id()
        return True


class RequestIdQueue(DjangoRQ):
    """django-rq's queue (settings.RQ["QUEUE_CLASS"]): a job made during a request keeps its id."""

    def create_job(self, *args, **kwargs):
        value = _current.get()
        if value is not None:
            kwargs["meta"] = {"request_id": value, **(kwargs.get("meta") or {})}
        return super().create_job(*args, **kwargs)
