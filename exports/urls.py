from django.urls import path

from exports import views

app_name = "exports"
urlpatterns = [
    path("request/", views.export_request_view, name="request"),
]
