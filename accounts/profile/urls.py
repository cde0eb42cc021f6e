"""The settings page's paths, part of the `accounts` namespace (accounts/urls.py)."""

from django.urls import path

from accounts.profile import views

profile_patterns = [
    path("settings/", views.settings_view, name="settings"),
    path("settings/name/", views.name_change_view, name="settings-name"),
    path("settings/email/", views.email_change_view, name="settings-email"),
    path("settings/email/confirm/<str:token>/", views.email_change_confirm_view, name="email-change-confirm"),
    path("settings/password/", views.password_change_view, name="settings-password"),
    path("settings/sessions/end/", views.sessions_end_view, name="settings-sessions-end"),
    path("settings/two-factor/setup/", views.two_factor_setup_view, name="two-factor-setup"),
    path("settings/two-factor/confirm/", views.two_factor_confirm_view, name="two-factor-confirm"),
    path("settings/two-factor/recovery-codes/", views.recovery_codes_renew_view, name="recovery-codes-renew"),
    path("settings/two-factor/recovery-codes.txt", views.recovery_codes_download_view, name="recovery-codes-download"),
    path("settings/two-factor/recovery-codes/saved/", views.recovery_codes_saved_view, name="recovery-codes-saved"),
    path("settings/two-factor/off/", views.two_factor_off_view, name="two-factor-off"),
    path("login/code/", views.login_code_view, name="login-code"),
    path("team/rename/", views.team_rename_view, name="team-rename"),
]
