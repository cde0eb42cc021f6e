"""The real URLconf plus two probe endpoints, for testing the API platform's error paths."""

from django.urls import path
from rest_framework.response import Response

from config.urls import handler404, handler500  # noqa: F401
from config.urls import urlpatterns as real_urlpatterns
from core.views import AccountAPIView


class EchoView(AccountAPIView):
    def post(self, request):
        return Response({"received": request.data})


class BoomView(AccountAPIView):
    def get(self, request):
        raise ZeroDivisionError("an unexpected bug")


urlpatterns = [
    path("api/v1/_echo/", EchoView.as_view()),
    path("api/v1/_boom/", BoomView.as_view()),
    *real_urlpatterns,
]
