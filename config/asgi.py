"""ASGI entry point: HTTP and websockets on one daphne process."""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from config.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter({
    "http": django_asgi_app,
    # Session auth (with an Origin check in the consumer) or an API key on the handshake.
    "websocket": AuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
})
