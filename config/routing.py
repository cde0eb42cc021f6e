"""Websocket routes, and who reads a handshake's session."""

from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from django.urls import path

from accounts.resolution import bearer_token
from chat.consumers import ChatConsumer, handshake_header

websocket_urlpatterns = [
    path("ws/chat/", ChatConsumer.as_asgi()),
]


class SessionUnlessBearer:
    """A handshake that presents an API key (`Authorization: Bearer …`) goes to the routes
    without the cookie, session and auth middleware: its consumer authenticates the key and
    never reads a session, and loading one cost a database thread hop per handshake
    (docs/benchmarks.md, Chat). Every other handshake gets the session stack as before."""

    def __init__(self, inner):
        self.inner = inner
        self.with_session = AuthMiddlewareStack(inner)

    async def __call__(self, scope, receive, send):
        # The header the consumer reads, read the same way (its first Authorization header).
        if bearer_token(handshake_header(scope, b"authorization")) is not None:
            return await self.inner(scope, receive, send)
        return await self.with_session(scope, receive, send)


websocket_application = SessionUnlessBearer(URLRouter(websocket_urlpatterns))
