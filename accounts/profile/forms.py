"""The settings page's forms: each validates its own fields; the services decide the rest."""

from django import forms

from accounts.profile.services import NAME_MAX, TEAM_NAME_MAX


class NameForm(forms.Form):
    full_name = forms.CharField(
        max_length=NAME_MAX, required=False, label="Your name", widget=forms.TextInput(attrs={"autocomplete": "name"})
    )


class EmailChangeForm(forms.Form):
    new_email = forms.EmailField(label="New email address", widget=forms.EmailInput(attrs={"autocomplete": "email"}))
    password = forms.CharField(
        label="Your current password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )


class PasswordChangeForm(forms.Form):
    current_password = forms.CharField(
        label="Current password", strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "current-password"})
    )
    new_password = forms.CharField(
        label="New password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="At least 8 characters, not only digits, not a common password.",
    )


class CodeForm(forms.Form):
    code = forms.CharField(
        label="Code",
        max_length=32,
        widget=forms.TextInput(
            attrs={
                "autocomplete": "one-time-code",
                "inputmode": "numeric",
                "autocapitalize": "off",
                "spellcheck": "false",
            }
        ),
    )


class TwoFactorOffForm(forms.Form):
    code = forms.CharField(
        label="A code from your app, or a recovery code",
        max_length=32,
        required=False,
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code"}),
    )
    password = forms.CharField(
        label="…or your password",
        strip=False,
        required=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )


class TeamRenameForm(forms.Form):
    name = forms.CharField(
        max_length=TEAM_NAME_MAX,
        required=False,
        label="Team name",
        widget=forms.TextInput(attrs={"autocomplete": "organization"}),
    )
