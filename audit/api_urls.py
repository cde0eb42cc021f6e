from django.urls import path

from audit.api import AuditListView

urlpatterns = [
    path("audit/", AuditListView.as_view(), name="api-audit"),
]
