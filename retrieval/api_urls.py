from django.urls import path

from retrieval.api import RetrievalSettingsView, SearchView
from retrieval.dify import DifyRetrievalView

urlpatterns = [
    path("search/", SearchView.as_view(), name="api-search"),
    # Dify appends /retrieval to the endpoint it is given (…/api/v1/dify).
    path("dify/retrieval", DifyRetrievalView.as_view(), name="api-dify-retrieval"),
    path("settings/retrieval/", RetrievalSettingsView.as_view(), name="api-retrieval-settings"),
]
