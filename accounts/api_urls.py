from django.urls import path

from accounts.api import CurrentAccountView

urlpatterns = [
    path("account/", CurrentAccountView.as_view(), name="api-account"),
]
