"""ASGI entry point: HTTP (Django, and the MCP server at /mcp) and websockets, served by
WEB_PROCESSES daphne processes."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.core.asgi import get_asgi_application

django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter

from config.routing import websocket_application
from core.limits import BodySizeLimit, install_daphne_body_limit
from core.presence import served_by_daphne, start_heartbeat
from integrations.mcp_http import McpRouter

# Over-limit request bodies are refused as they arrive, before anything buffers them
# (core/limits.py): on daphne's connections, and in ASGI for any other server.
install_daphne_body_limit()
if served_by_daphne():
    start_heartbeat()  # /healthz counts the web processes that serve

application = ProtocolTypeRouter(
    {
        # /mcp: the MCP server (integrations/mcp_http.py), beside Django; the body limit covers both.
        "http": BodySizeLimit(McpRouter(django_asgi_app)),
        # Session auth (with an Origin check in the consumer) or an API key on the handshake.
        "websocket": websocket_application,
    }
)
