from django.urls import path

from billing.api import CreditsView

urlpatterns = [
    path("credits/", CreditsView.as_view(), name="api-credits"),
]
