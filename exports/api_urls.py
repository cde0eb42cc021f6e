from django.urls import path

from exports.api import ExportDetailView, ExportDownloadView, ExportListView

urlpatterns = [
    path("exports/", ExportListView.as_view(), name="api-exports"),
    path("exports/<int:export_id>/", ExportDetailView.as_view(), name="api-export"),
    path("exports/<int:export_id>/download/<str:token>/", ExportDownloadView.as_view(), name="api-export-download"),
]
