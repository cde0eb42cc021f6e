from django.contrib.auth import views as auth_views
from django.urls import include, path, reverse_lazy

from accounts import views
from accounts.forms import ClaimPasswordResetForm
from accounts.profile.urls import profile_patterns

account_patterns = [
    path("signup/", views.signup_view, name="signup"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "password-reset/",
        views.PasswordResetView.as_view(
            form_class=ClaimPasswordResetForm,
            template_name="accounts/password_reset.html",
            success_url=reverse_lazy("accounts:password_reset_done"),
            email_template_name="accounts/password_reset_email.txt",
        ),
        name="password_reset",
    ),
    path(
        "password-reset/sent/",
        auth_views.PasswordResetDoneView.as_view(template_name="accounts/password_reset_done.html"),
        name="password_reset_done",
    ),
    path(
        "password-reset/<uidb64>/<token>/",
        auth_views.PasswordResetConfirmView.as_view(
            template_name="accounts/password_reset_confirm.html",
            success_url=reverse_lazy("accounts:password_reset_complete"),
        ),
        name="password_reset_confirm",
    ),
    path(
        "password-reset/done/",
        auth_views.PasswordResetCompleteView.as_view(template_name="accounts/password_reset_complete.html"),
        name="password_reset_complete",
    ),
    path("verify-email/resend/", views.verify_email_resend_view, name="verify-email-resend"),
    path("verify-email/<str:token>/", views.verify_email_view, name="verify-email"),
    path("invitations/<int:invitation_id>/accept/", views.invitation_accept_view, name="invitation-accept"),
    path("invitations/<int:invitation_id>/decline/", views.invitation_decline_view, name="invitation-decline"),
    path("invitations/<str:token>/", views.invitation_view, name="invitation"),
    path("accounts/new/", views.account_create_view, name="account-create"),
    path("accounts/switch/", views.account_switch_view, name="switch"),
    path("team/", views.team_view, name="team"),
    path("team/invite/", views.member_invite_view, name="invite"),
    path("team/members/<int:membership_id>/role/", views.member_role_view, name="member-role"),
    path("team/members/<int:membership_id>/remove/", views.member_remove_view, name="member-remove"),
    path("team/invitations/<int:invitation_id>/cancel/", views.invitation_cancel_view, name="invitation-cancel"),
    path("team/api-keys/", views.api_key_create_view, name="api-key-create"),
    path("team/api-keys/<int:key_id>/revoke/", views.api_key_revoke_view, name="api-key-revoke"),
    path("team/scim-tokens/", include("accounts.scim.page_urls")),
    path("team/delete/", views.account_delete_view, name="account-delete"),
    path("", include("accounts.domains.urls")),  # the Team page's verified domains and their emailed link
    path("", include("accounts.sso.urls")),  # single sign-on: /sso/login/, /sso/callback/, the Team switch
    *profile_patterns,  # the settings page, the sign-in's code step, the team's name
]

urlpatterns = [
    path("", include((account_patterns, "accounts"))),
]
