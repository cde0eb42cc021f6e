from django.urls import path

from sources import api

urlpatterns = [
    path("sources/", api.SourceListView.as_view(), name="api-sources"),
    path("sources/<int:source_id>/", api.SourceDetailView.as_view(), name="api-source"),
    path("sources/<int:source_id>/sync/", api.SourceSyncView.as_view(), name="api-source-sync"),
]
