from django.urls import path

from documents import api, collections_api

urlpatterns = [
    path("documents/", api.DocumentListView.as_view(), name="api-documents"),
    path("documents/<int:document_id>/", api.DocumentDetailView.as_view(), name="api-document"),
    path("documents/<int:document_id>/reindex/", api.DocumentReindexView.as_view(), name="api-document-reindex"),
    path(
        "documents/<int:document_id>/reindex/cancel/",
        api.DocumentReindexCancelView.as_view(),
        name="api-document-reindex-cancel",
    ),
    path("documents/<int:document_id>/move/", collections_api.DocumentMoveView.as_view(), name="api-document-move"),
    path("collections/", collections_api.CollectionListView.as_view(), name="api-collections"),
    path("collections/<int:collection_id>/", collections_api.CollectionDetailView.as_view(), name="api-collection"),
    path("reindex/", api.AccountReindexView.as_view(), name="api-reindex"),
    path("reindex/<int:run_id>/cancel/", api.AccountReindexCancelView.as_view(), name="api-reindex-cancel"),
]
