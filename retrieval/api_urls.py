from django.urls import path

from retrieval.api import RetrievalSettingsView, SearchView

urlpatterns = [
    path("search/", SearchView.as_view(), name="api-search"),
    path("settings/retrieval/", RetrievalSettingsView.as_view(), name="api-retrieval-settings"),
]
