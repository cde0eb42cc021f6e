from django.urls import path

from accounts.sso import views

urlpatterns = [
    path("sso/login/", views.sso_login_view, name="sso-login"),
    path("sso/callback/", views.sso_callback_view, name="sso-callback"),
    path("team/sso/", views.sso_required_set_view, name="sso-required"),
]
