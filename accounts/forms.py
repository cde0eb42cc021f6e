from django import forms
from django.contrib.auth.forms import AuthenticationForm

from accounts.models import Role


class SignupForm(forms.Form):
    full_name = forms.CharField(max_length=150, required=False, label="Your name",
                                widget=forms.TextInput(attrs={"autocomplete": "name"}))
    email = forms.EmailField(label="Work email", widget=forms.EmailInput(attrs={"autocomplete": "email"}))
    password = forms.CharField(widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}), label="Password",
                               help_text="At least 8 characters, not only digits, not a common password.")
    account_name = forms.CharField(max_length=120, required=False, label="Team name",
                                   widget=forms.TextInput(attrs={"autocomplete": "organization"}),
                                   help_text="You can rename it later. Invited? Your invitations are accepted too.")


class LoginForm(AuthenticationForm):
    username = forms.EmailField(label="Email", widget=forms.EmailInput(attrs={"autofocus": True,
                                                                              "autocomplete": "email"}))

    error_messages = {
        "invalid_login": "That email and password do not match an account. Check both and try again.",
        "inactive": "This user has been deactivated. Ask your team's owner or support for help.",
    }


class InviteForm(forms.Form):
    email = forms.EmailField(label="Email address", widget=forms.EmailInput(attrs={"autocomplete": "off"}))
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100, label="Key name", help_text="e.g. the integration that will use it")


class AccountForm(forms.Form):
    name = forms.CharField(max_length=120, label="Team name")
