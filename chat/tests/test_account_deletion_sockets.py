"""Deleting an account closes every open websocket of it: its keys' and
its members' sockets get 4401 within a second, and a new handshake is refused; another
account's sockets stay open."""

import pytest

from accounts import services
from accounts.tests.factories import make_api_key
from chat.tests.test_socket_security import ORIGIN, _close_code, _member_socket
from chat.tests.test_websocket import Socket, _key_socket, _session_headers

pytestmark = pytest.mark.django_db(transaction=True)


def test_deleting_an_account_closes_its_keys_and_members_sockets(
    client, account_a, owner_a, account_b, handbook, fake_llm
):
    raw = make_api_key(account_a)
    key_socket = Socket([(b"authorization", f"Bearer {raw}".encode())])
    assert key_socket.connect()[0]
    member_socket, member, _ = _member_socket(client, account_a)
    owner_socket = Socket(_session_headers(client, owner_a, ORIGIN))
    assert owner_socket.connect()[0]
    elsewhere = _key_socket(account_b)

    services.account_delete(account=account_a, actor=owner_a)  # commits: the notice goes out

    for socket in (key_socket, member_socket, owner_socket):
        assert _close_code(socket, within=1.0) == 4401
    assert _close_code(elsewhere, within=0.3) is None
    assert elsewhere.ask("Anything about plants?")[-1]["type"] in ("chat.done", "chat.error")
    elsewhere.close()
    # New handshakes: the key is revoked and the member belongs to no account.
    again = Socket([(b"authorization", f"Bearer {raw}".encode())])
    again.connect()
    assert _close_code(again) == 4401
    member_again = Socket(_session_headers(client, member, ORIGIN))
    member_again.connect()
    assert _close_code(member_again) == 4401
