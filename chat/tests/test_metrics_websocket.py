"""A websocket turn on /metrics (surface websocket, done and provider_unavailable) and its log
lines carrying the socket's request id with the turn's number, also from the turn's thread."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from chat.tests.test_websocket import Socket
from config.tests.test_metrics import scrape, value

pytestmark = pytest.mark.django_db(transaction=True)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_websocket_turns_are_counted_and_log_with_the_sockets_request_id(account_a, handbook, fake_llm, settings):
    from accounts.tests.factories import make_api_key
    from core.request_id import RequestIdFilter

    client = Client()
    fake_llm.answer = "Everyone has twenty-eight days of holiday [Document 1]."
    before = scrape(client)
    records = _Records()
    records.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.addHandler(records)
    try:
        socket = Socket(
            [(b"authorization", f"Bearer {make_api_key(account_a)}".encode()), (b"x-request-id", b"sock-7")]
        )
        assert socket.connect()[0]
        assert socket.ask("How much holiday do we get?")[-1]["type"] == "chat.done"
        settings.CHAT_MODEL, settings.CHAT_FALLBACK_MODEL = "primary-model", "fallback-model"
        fake_llm.fail("primary-model", 500)
        fake_llm.fail("fallback-model", 500)
        assert socket.ask("And laptops?")[-1]["code"] == "provider_unavailable"
        socket.close()
    finally:
        root.removeHandler(records)
    after = scrape(client)
    for outcome in ("done", "provider_unavailable"):
        assert (
            value(after, "groundwork_chat_turns_total", surface="websocket", outcome=outcome)
            == value(before, "groundwork_chat_turns_total", surface="websocket", outcome=outcome) + 1
        )
    assert (
        value(after, "groundwork_chat_time_to_first_token_seconds_count", surface="websocket")
        == value(before, "groundwork_chat_time_to_first_token_seconds_count", surface="websocket") + 1
    )
    # The model calls are made from the turn's thread: their lines carry the turn's id too.
    model_calls = {r.request_id for r in records.records if "/v1/chat/completions" in r.getMessage()}
    assert {"sock-7:1", "sock-7:2"} <= model_calls, model_calls
