"""ASGI entry point: HTTP and websockets, served by WEB_PROCESSES daphne processes."""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from config.routing import websocket_application  # noqa: E402
from core.limits import BodySizeLimit, install_daphne_body_limit  # noqa: E402
from core.presence import served_by_daphne, start_heartbeat  # noqa: E402

# Over-limit request bodies are refused as they arrive, before anything buffers them
# (core/limits.py): on daphne's connections, and in ASGI for any other server.
install_daphne_body_limit()
if served_by_daphne():
    start_heartbeat()  # /healthz counts the web processes that serve

application = ProtocolTypeRouter({
    "http": BodySizeLimit(django_asgi_app),
    # Session auth (with an Origin check in the consumer) or an API key on the handshake.
    "websocket": websocket_application,
})
