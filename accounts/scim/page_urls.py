"""The Team page's SCIM token forms (accounts/urls.py includes them in the "accounts" namespace)."""

from django.urls import path

from accounts.scim import pages

urlpatterns = [
    path("", pages.scim_token_create_view, name="scim-token-create"),
    path("<int:token_id>/revoke/", pages.scim_token_revoke_view, name="scim-token-revoke"),
]
