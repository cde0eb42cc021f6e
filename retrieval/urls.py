from django.urls import path

from retrieval import views

# Under /documents/ beside documents' own pages (the section lives on the Knowledge base).
urlpatterns = [
    path("retrieval-test/", views.retrieval_test_view, name="retrieval-test"),
    path("embedding-model/migrate/", views.embedding_migration_start_view, name="embedding-migrate"),
]
