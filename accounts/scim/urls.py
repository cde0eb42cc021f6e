"""/scim/v2/ (config/urls.py includes it under the namespace "scim")."""

from django.urls import path, re_path

from accounts.scim import views

urlpatterns = [
    path("", views.not_found_view, name="root"),
    path("Users", views.users_view, name="users"),
    path("Users/<str:scim_id>", views.user_view, name="user"),
    path("Groups", views.groups_view, name="groups"),
    path("Groups/<str:group>", views.group_view, name="group"),
    path("ServiceProviderConfig", views.service_provider_config_view, name="service-provider-config"),
    path("Schemas", views.schemas_view, name="schemas"),
    path("ResourceTypes", views.resource_types_view, name="resource-types"),
    re_path(r"^(?P<rest>.+)$", views.not_found_view),
]
