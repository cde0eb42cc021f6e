from django.urls import path

from billing import views

urlpatterns = [
    path("", views.credits_view, name="credits"),
]
