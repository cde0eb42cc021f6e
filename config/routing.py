"""Websocket routes (the chat consumer joins here)."""
websocket_urlpatterns: list = []
