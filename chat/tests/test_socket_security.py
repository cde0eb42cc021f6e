"""The websocket's security: revocation and removal reach open sockets, the socket's
limits hold and bad frames are refused. Through the real ASGI application,
channel layer (Redis), database and a fake model server on loopback."""

import asyncio
import json
import time

import pytest

from accounts import services
from accounts.models import ApiKey, Membership
from accounts.tests.factories import add_member, make_api_key
from billing.models import CreditHold, CreditLedgerEntry
from billing.selectors import balance_get
from chat.models import Message
from chat.tests.test_websocket import Socket, _key_socket, _session_headers
from core.tenancy import account_context

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = "http://localhost:8000"


def _close_code(socket: Socket, within: float = 1.0):
    """The close code the server sends within `within` seconds (frames before it are skipped),
    or None when the socket is still open then."""

    async def wait():
        # Polls the output queue: a timed-out receive_output would cancel the application.
        queue = socket.communicator.output_queue
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            while not queue.empty():
                output = queue.get_nowait()
                if output["type"] == "websocket.close":
                    return output.get("code")
            await asyncio.sleep(0.01)
        return None

    return socket._run(wait(), timeout=within + 5)


def _revoke(account, raw_key):
    with account_context(account):
        key = ApiKey.objects.for_account(account).get(prefix=raw_key[:10])
        services.api_key_revoke(account=account, actor=None, key_id=key.pk)


def _key_id(account, raw_key) -> int:
    with account_context(account):
        return ApiKey.objects.for_account(account).get(prefix=raw_key[:10]).pk


def _member_socket(client, account, role="member"):
    member = add_member(account, role=role)
    socket = Socket(_session_headers(client, member, ORIGIN))
    assert socket.connect()[0]
    with account_context(account):
        membership = Membership.objects.for_account(account).get(user=member)
    return socket, member, membership


# --- finding 3: revocation and removal reach open sockets -----------------------------------


def test_a_revoked_keys_open_socket_is_closed_within_a_second(account_a, handbook, fake_llm):
    raw = make_api_key(account_a)
    socket = Socket([(b"authorization", f"Bearer {raw}".encode())])
    assert socket.connect()[0]
    assert socket.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
    _revoke(account_a, raw)
    assert _close_code(socket, within=1.0) == 4401
    # A new handshake with the revoked key is refused too.
    again = Socket([(b"authorization", f"Bearer {raw}".encode())])
    again.connect()
    assert _close_code(again) == 4401


def test_a_revoked_key_cannot_ask_another_question_on_its_socket(account_a, handbook, fake_llm):
    raw = make_api_key(account_a)
    socket = Socket([(b"authorization", f"Bearer {raw}".encode())])
    assert socket.connect()[0]
    _revoke(account_a, raw)
    fake_llm.clear()
    with account_context(account_a):
        before = balance_get(account=account_a)
    socket.send({"type": "chat.message", "message": "What is our holiday policy?"})
    assert _close_code(socket, within=1.0) == 4401
    time.sleep(0.3)
    assert fake_llm.requests == []
    with account_context(account_a):
        assert balance_get(account=account_a) == before


def test_a_message_in_the_race_window_is_refused_with_chat_error(account_a, handbook, fake_llm):
    """The key is revoked but the socket has not heard yet (e.g. the notice is still on its
    way): the next message re-checks the key before it retrieves or spends."""
    raw = make_api_key(account_a)
    socket = Socket([(b"authorization", f"Bearer {raw}".encode())])
    assert socket.connect()[0]
    with account_context(account_a):  # revoked without the service, so no notice is sent
        ApiKey.objects.for_account(account_a).filter(prefix=raw[:10]).update(revoked_at="2024-01-01T00:00:00Z")
    fake_llm.clear()
    with account_context(account_a):
        before = balance_get(account=account_a)
    frames = socket.ask("What is our holiday policy?")
    assert frames == [{"type": "chat.error", "code": "unauthenticated", "message": frames[0]["message"]}]
    assert _close_code(socket) == 4401
    assert fake_llm.requests == []
    with account_context(account_a):
        assert balance_get(account=account_a) == before


def test_a_removed_members_open_socket_is_closed(client, account_a, owner_a, handbook, fake_llm):
    socket, member, membership = _member_socket(client, account_a)
    assert socket.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
    with account_context(account_a):
        services.member_remove(account=account_a, actor=owner_a, membership_id=membership.pk)
    assert _close_code(socket, within=1.0) == 4401


def test_a_removed_members_message_in_the_race_window_is_refused(client, account_a, owner_a, handbook, fake_llm):
    socket, member, membership = _member_socket(client, account_a)
    with account_context(account_a):  # removed without the service: no notice
        Membership.objects.for_account(account_a).filter(pk=membership.pk).delete()
    fake_llm.clear()
    frames = socket.ask("What is our holiday policy?")
    assert frames[-1]["type"] == "chat.error" and frames[-1]["code"] == "unauthenticated"
    assert _close_code(socket) == 4401
    assert fake_llm.requests == []


def test_a_role_change_reauthorises_the_open_socket(client, account_a, owner_a, handbook, fake_llm):
    socket, member, membership = _member_socket(client, account_a)
    with account_context(account_a):
        services.member_change_role(account=account_a, actor=owner_a, membership_id=membership.pk, role="admin")
    assert _close_code(socket, within=1.0) is None  # still allowed to chat: stays open
    assert socket.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
    socket.close()


def test_revoking_mid_answer_stops_the_answer_and_settles_it(account_a, handbook, fake_llm):
    fake_llm.backend.chunk_delay = 0.05
    fake_llm.answer = " ".join(f"word{i}" for i in range(200))
    raw = make_api_key(account_a)
    socket = Socket([(b"authorization", f"Bearer {raw}".encode())])
    assert socket.connect()[0]
    socket.send({"type": "chat.message", "message": "Tell me about our holidays"})
    assert socket.receive()["type"] == "chat.sources"
    _revoke(account_a, raw)
    assert _close_code(socket, within=1.0) == 4401
    deadline = time.monotonic() + 10
    with account_context(account_a):
        while CreditHold.objects.for_account(account_a).filter(status="open").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        answer = Message.objects.for_account(account_a).filter(role="assistant").latest("pk")
        assert answer.status == "cancelled" and len(answer.content.split()) < 200


def test_other_principals_sockets_stay_open(client, account_a, owner_a, handbook, fake_llm):
    revoked, kept = make_api_key(account_a), make_api_key(account_a, name="other")
    first = Socket([(b"authorization", f"Bearer {revoked}".encode())])
    second = Socket([(b"authorization", f"Bearer {kept}".encode())])
    assert first.connect()[0] and second.connect()[0]
    _revoke(account_a, revoked)
    assert _close_code(first) == 4401
    assert second.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
    second.close()


# --- finding 8: the socket's limits ---------------------------------------------------------


def test_the_origin_check_compares_scheme_host_and_port(client, account_a, owner_a, handbook, fake_llm):
    for origin in (
        "http://localhost:9999",
        "https://localhost:8000",
        "http://localhost",
        "ws://localhost:8000",
        "http://localhost:8000.evil.example",
        "null",
    ):
        headers = _session_headers(client, owner_a, origin) + [(b"host", b"localhost:8000")]
        socket = Socket(headers)
        socket.connect()
        assert _close_code(socket) == 4403, origin
    good = Socket(_session_headers(client, owner_a, ORIGIN) + [(b"host", b"localhost:8000")])
    assert good.connect()[0]
    assert _close_code(good, within=0.3) is None
    assert good.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
    good.close()


def test_the_origin_is_the_hosts_own_origin_behind_another_port(client, account_a, owner_a, settings, fake_llm):
    """PORT=9000 make run: the page's origin is the Host it was served from."""
    headers = _session_headers(client, owner_a, "http://127.0.0.1:9000") + [(b"host", b"127.0.0.1:9000")]
    socket = Socket(headers)
    assert socket.connect()[0]
    assert _close_code(socket, within=0.3) is None
    socket.close()
    # A Host the site does not serve proves nothing.
    evil = Socket(_session_headers(client, owner_a, "http://evil.example") + [(b"host", b"evil.example")])
    evil.connect()
    assert _close_code(evil) == 4403


def test_open_sockets_per_principal_are_capped_with_4429(account_a, settings, fake_llm):
    settings.WS_MAX_SOCKETS_PER_PRINCIPAL = 2
    raw = make_api_key(account_a)
    headers = [(b"authorization", f"Bearer {raw}".encode())]
    first, second, third = Socket(headers), Socket(headers), Socket(headers)
    assert first.connect()[0] and second.connect()[0]
    third.connect()
    assert _close_code(third) == 4429
    # Another key of the same account has its own allowance.
    other = _key_socket(account_a)
    assert _close_code(other, within=0.3) is None
    # A closed socket frees its place.
    first.close()
    fourth = Socket(headers)
    assert fourth.connect()[0]
    assert _close_code(fourth, within=0.3) is None
    for socket in (second, fourth, other):
        socket.close()


def test_frames_per_second_are_capped_with_4429(account_a, settings, fake_llm):
    settings.WS_FRAMES_PER_SECOND, settings.WS_FRAME_BURST = 5, 10
    socket = _key_socket(account_a)
    for _ in range(10):  # the burst is allowed
        socket.send({"type": "chat.cancel"})
    assert _close_code(socket, within=0.3) is None
    for _ in range(10):
        socket.send({"type": "chat.cancel"})
    frames = []
    deadline = time.monotonic() + 2

    async def drain():
        queue = socket.communicator.output_queue
        while time.monotonic() < deadline:
            while not queue.empty():
                output = queue.get_nowait()
                if output["type"] == "websocket.close":
                    return output.get("code")
                frames.append(json.loads(output["text"]))
            await asyncio.sleep(0.01)

    code = socket._run(drain())
    assert code == 4429
    assert frames and frames[-1]["code"] == "rate_limited"


def test_a_steady_pace_within_the_rate_is_not_cut_off(account_a, settings, fake_llm):
    settings.WS_FRAMES_PER_SECOND, settings.WS_FRAME_BURST = 20, 3
    socket = _key_socket(account_a)
    for _ in range(12):
        socket.send({"type": "chat.cancel"})
        time.sleep(0.1)
    assert _close_code(socket, within=0.3) is None
    socket.close()


def test_a_cancel_during_preparation_cancels_the_turn_and_the_answer_is_not_charged(account_a, handbook, fake_llm):
    embeddings = fake_llm.backend.embeddings

    def slow_embeddings(body, texts):  # retrieval takes a while: the cancel arrives during it
        time.sleep(0.5)
        return embeddings(body, texts)

    fake_llm.backend.embeddings = slow_embeddings
    fake_llm.answer = " ".join(f"word{i}" for i in range(200))
    fake_llm.clear()
    socket = _key_socket(account_a)
    socket.send({"type": "chat.message", "message": "Tell me about our holiday policy"})
    time.sleep(0.1)
    socket.send({"type": "chat.cancel"})
    frames = socket.until_final()
    done = frames[-1]
    assert done["type"] == "chat.done" and done["status"] == "cancelled", frames
    assert all(f["type"] != "chat.token" for f in frames)
    assert done["usage"]["completion_tokens"] == 0
    assert fake_llm.requests_to("/v1/chat/completions") == []
    with account_context(account_a):
        answer = Message.objects.for_account(account_a).get(pk=done["message_id"])
        assert answer.status == "cancelled" and answer.credits_charged == 0
        assert (
            not CreditLedgerEntry.objects.for_account(account_a)
            .filter(reference=f"message:{answer.pk}", delta__lt=0)
            .exists()
        )
        assert not CreditHold.objects.for_account(account_a).filter(status="open").exists()
    # The socket is ready for the next question.
    fake_llm.backend.embeddings = embeddings
    assert socket.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
    socket.close()


# --- finding 7: bad frames are a chat.error, and the socket stays open ----------------------


@pytest.mark.parametrize(
    "text, code",
    [
        ("[" * 100_000 + "]" * 100_000, "too_large"),
        ("[" * 20_000 + "]" * 20_000, "bad_request"),
        ('{"type": "chat.message", "message": ' + "[" * 5000 + "]" * 5000 + "}", "bad_request"),
        ('{"type": "chat.message", "message": "hi", "conversation_id": 1e400}', "bad_request"),
        ('{"type": "chat.message", "message": "hi", "conversation_id": -1e400}', "bad_request"),
        ('{"type": "chat.message", "message": "hi", "conversation_id": NaN}', "bad_request"),
        ('{"type": "chat.message", "message": "hi", "conversation_id": 1.5}', "bad_request"),
        ('{"type": "chat.message", "message": "hi", "conversation_id": true}', "bad_request"),
        ('{"type": "chat.message", "message": "hi", "conversation_id": 99999999999999999999999}', "bad_request"),
        ('{"type": "chat.message", "message": "hi", "conversation_id": {"a": 1}}', "bad_request"),
        ('{"type": "chat.message", "message": "what is\\u0000 our policy?"}', "bad_request"),
        ('{"type": "chat.message", "message": ["not", "text"]}', "bad_request"),
        ('{"type": "chat.message", "message": "x", "conversation_id": "1\\u0000"}', "bad_request"),
        ('{"type": "chat.message", "message": "' + "x" * 2_800_000 + '"}', "too_large"),
        ("[1, 2, 3]", "bad_request"),
        ('"chat.message"', "bad_request"),
        ("null", "bad_request"),
        ("42", "bad_request"),
        ('{"type": ["chat.message"]}', "bad_request"),
        ("\u0000", "bad_request"),
    ],
)
def test_bad_frames_are_a_chat_error_and_the_socket_stays_open(account_a, handbook, fake_llm, text, code):
    socket = _key_socket(account_a)
    socket.send_text(text)
    frame = socket.receive()
    assert frame["type"] == "chat.error" and frame["code"] == code and frame["message"], frame
    assert socket.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
    socket.close()


def test_a_binary_frame_is_a_chat_error_and_the_socket_stays_open(account_a, handbook, fake_llm):
    socket = _key_socket(account_a)
    socket._run(socket.communicator.send_to(bytes_data=b"\x00\x01binary"))
    frame = socket.receive()
    assert frame["type"] == "chat.error" and frame["code"] == "bad_request"
    assert socket.ask("What is our holiday policy?")[-1]["type"] == "chat.done"
    socket.close()


def test_an_accounts_notice_closes_every_socket_of_the_account(client, account_a, account_b, handbook, fake_llm):
    """What deleting (or suspending) an account sends: keys' and members' sockets close."""
    from core import sockets

    key_socket = _key_socket(account_a)
    member_socket, _, _ = _member_socket(client, account_a)
    elsewhere = _key_socket(account_b)
    sockets.account_sockets_close_on_commit(account_a.pk)
    assert _close_code(key_socket) == 4401 and _close_code(member_socket) == 4401
    assert _close_code(elsewhere, within=0.3) is None
    elsewhere.close()


def test_a_role_lowered_to_one_that_may_not_chat_closes_the_socket_with_4403(
    client, account_a, owner_a, handbook, fake_llm, monkeypatch
):
    # Every role chats today; a role that may not would say so in the table (accounts/permissions.py).
    from accounts.permissions import RULES, Action, Grant

    monkeypatch.setitem(RULES, Action.CHAT, {**RULES[Action.CHAT], "member": Grant.NONE})
    socket, member, membership = _member_socket(client, account_a, role="admin")
    with account_context(account_a):
        services.member_change_role(account=account_a, actor=owner_a, membership_id=membership.pk, role="member")
    assert _close_code(socket, within=1.0) == 4403
    # And a new handshake in that role is refused the same way.
    again = Socket(_session_headers(client, member, ORIGIN))
    again.connect()
    assert _close_code(again) == 4403
