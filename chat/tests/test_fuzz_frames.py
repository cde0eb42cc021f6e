"""Property-based fuzzing of the websocket's frames: whatever a client
sends (any JSON, any text, frames of the wrong type or shape, odd ids, tags and numbers),
the socket answers with a `chat.error` of the contract's shape or a normal turn, never a
server error, and stays open for the next frame."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat.tests.test_websocket import _key_socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
FRAME = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("chat.message"), "message": st.one_of(st.text(max_size=300), JSON)},
        optional={"conversation_id": JSON, "collection": JSON, "tags": JSON},
    ),
    st.fixed_dictionaries(
        {"type": st.just("chat.regenerate")},
        optional={"conversation_id": st.one_of(st.integers(), JSON), "message": JSON},
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["chat.cancel", "chat.x", "", "chat.message "])}, optional={"message": JSON}
    ),
    st.dictionaries(st.text(max_size=10), JSON, max_size=4),
    JSON,
)
CODES = {
    "bad_request",
    "rate_limited",
    "too_large",
    "insufficient_credits",
    "budget_exceeded",
    "not_found",
    "provider_unavailable",
    "forbidden",
    "invalid_tags",
    "nothing_to_regenerate",
}


def test_any_frame_gets_an_answer_of_the_contracts_shape(account_a, handbook, fake_llm, settings_override):
    socket = _key_socket(account_a)

    @settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(frame=FRAME, as_text=st.booleans(), raw=st.text(max_size=50))
    def check(frame, as_text, raw):
        text = (raw if as_text else json.dumps(frame)) or " "  # (the test client sends no empty frame)
        socket.send_text(text)
        if _is_cancel(text):
            return  # a cancel with nothing running has nothing to answer
        final = _answer(socket)
        assert final["type"] in ("chat.done", "chat.error"), final
        if final["type"] == "chat.error":
            assert set(final) == {"type", "code", "message"} and final["code"] in CODES, final
            assert final["code"] != "server_error"

    check()
    # Still open and answering.
    frames = socket.ask("How much holiday do we get?")
    assert frames[-1]["type"] == "chat.done"
    socket.close()


def _is_cancel(text: str) -> bool:
    try:
        frame = json.loads(text)
    except ValueError:
        return False
    return isinstance(frame, dict) and frame.get("type") == "chat.cancel"


def _answer(socket):
    """The frame that ends what the client's frame started (every frame but a cancel gets one;
    waiting past the communicator's timeout would cancel the consumer)."""
    while True:
        frame = socket.receive(timeout=20)
        if frame["type"] in ("chat.done", "chat.error"):
            return frame


@pytest.fixture
def settings_override(settings):
    settings.WS_FRAMES_PER_SECOND, settings.WS_FRAME_BURST = 10_000.0, 10_000
    settings.CHAT_RATE_PER_USER = settings.CHAT_RATE_PER_ACCOUNT = "100000/min"
    return settings
