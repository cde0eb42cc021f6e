from django.urls import path

from sources import views

urlpatterns = [
    path("", views.sources_view, name="sources"),
    path("new/", views.source_create_view, name="source-create"),
    path("<int:source_id>/sync/", views.source_sync_view, name="source-sync"),
    path("<int:source_id>/delete/", views.source_delete_view, name="source-delete"),
]
