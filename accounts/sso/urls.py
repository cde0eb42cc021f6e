from django.urls import path

from accounts.sso import views

urlpatterns = [
    path("sso/login/", views.sso_login_view, name="sso-login"),
    path("sso/callback/", views.sso_callback_view, name="sso-callback"),
    path("team/sso/", views.sso_required_set_view, name="sso-required"),
    path("team/sso/staff/", views.staff_password_2fa_set_view, name="sso-staff-password"),
]
