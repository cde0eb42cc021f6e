"""The Team page's domain forms and the emailed link (accounts/urls.py, namespace "accounts")."""

from django.urls import path

from accounts.domains import pages

urlpatterns = [
    path("team/domains/", pages.domain_add_view, name="domain-add"),
    path("team/domains/<int:domain_id>/remove/", pages.domain_remove_view, name="domain-remove"),
    path("domains/verify/<str:token>/", pages.domain_verify_view, name="domain-verify"),
]
