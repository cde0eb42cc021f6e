"""A person's ended sessions lose their open websockets too (accounts/profile/): "Sign out
other sessions" and a new password close the sockets of the other sessions (4401) and keep
those of the session that made the change. Real ASGI app, channel layer and database."""

import pytest
from django.test import Client

from accounts.tests.factories import PASSWORD, add_member
from chat.tests.test_socket_security import ORIGIN, _close_code
from chat.tests.test_websocket import Socket, _session_headers

pytestmark = pytest.mark.django_db(transaction=True)


def _two_sessions(account):
    member = add_member(account)
    this, other = Client(), Client()
    this_socket = Socket(_session_headers(this, member, ORIGIN))
    other_headers = _session_headers(other, member, ORIGIN)
    other_socket = Socket(other_headers)
    assert this_socket.connect()[0] and other_socket.connect()[0]
    return this, this_socket, other_socket, other_headers


def test_sign_out_other_sessions_closes_their_sockets_and_keeps_this_ones(account_a):
    this, this_socket, other_socket, other_headers = _two_sessions(account_a)
    assert this.post("/settings/sessions/end/").status_code == 302
    assert _close_code(other_socket, within=1.5) == 4401
    assert _close_code(this_socket, within=0.5) is None
    # A new socket from the other session is refused as well.
    again = Socket(other_headers)
    again.connect()
    assert _close_code(again) == 4401
    this_socket.close()


def test_a_new_password_closes_the_other_sessions_sockets(account_a):
    this, this_socket, other_socket, _ = _two_sessions(account_a)
    response = this.post(
        "/settings/password/", {"current_password": PASSWORD, "new_password": "fresh-long-passphrase-2"}
    )
    assert response.status_code == 302
    assert _close_code(other_socket, within=1.5) == 4401
    assert _close_code(this_socket, within=0.5) is None
    this_socket.close()
