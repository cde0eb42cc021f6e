from django.urls import path

from documents import collection_views, tag_views, views

urlpatterns = [
    path("", views.knowledge_base_view, name="knowledge-base"),
    path("status/", views.documents_status_view, name="status"),
    path("upload/", views.upload_view, name="upload"),
    path("reindex/", views.account_reindex_view, name="account-reindex"),
    path("reindex/<int:run_id>/cancel/", views.account_reindex_cancel_view, name="account-reindex-cancel"),
    path("<int:document_id>/", views.document_view, name="document"),
    path("<int:document_id>/image/", views.document_image_view, name="image"),
    path("<int:document_id>/move/", collection_views.document_move_view, name="move"),
    path("collections/", collection_views.collections_view, name="collections"),
    path("collections/new/", collection_views.collection_create_view, name="collection-create"),
    path("collections/<int:collection_id>/", collection_views.collection_update_view, name="collection-update"),
    path("collections/<int:collection_id>/delete/", collection_views.collection_delete_view, name="collection-delete"),
    path("<int:document_id>/tags/", tag_views.document_tags_view, name="tags"),
    path("exclude-tags/", tag_views.exclude_tags_view, name="exclude-tags"),
    path("<int:document_id>/delete/", views.delete_view, name="delete"),
    path("<int:document_id>/reindex/", views.reindex_view, name="reindex"),
    path("<int:document_id>/reindex/cancel/", views.reindex_cancel_view, name="reindex-cancel"),
]
