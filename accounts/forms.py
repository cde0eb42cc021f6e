from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm, PasswordResetForm
from django.core.exceptions import ValidationError

from accounts import ratelimit
from accounts.models import KeyScope, Role, User


class SignupForm(forms.Form):
    full_name = forms.CharField(
        max_length=150, required=False, label="Your name", widget=forms.TextInput(attrs={"autocomplete": "name"})
    )
    email = forms.EmailField(label="Work email", widget=forms.EmailInput(attrs={"autocomplete": "email"}))
    password = forms.CharField(
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        label="Password",
        help_text="At least 8 characters, not only digits, not a common password.",
    )
    account_name = forms.CharField(
        max_length=120,
        required=False,
        label="Team name",
        widget=forms.TextInput(attrs={"autocomplete": "organization"}),
        help_text="You can rename it later. Invited to a team? Open the link in your invitation email to join it.",
    )


class InvitationSignupForm(forms.Form):
    """Sign-up from an invitation's link: the invited address, fixed (the posted value is
    ignored: Django uses the initial value of a disabled field), and no team of one's own."""

    full_name = SignupForm.base_fields["full_name"]
    email = forms.EmailField(
        label="Work email", disabled=True, widget=forms.EmailInput(attrs={"autocomplete": "email", "readonly": True})
    )
    password = SignupForm.base_fields["password"]


class RateLimitedLoginMixin:
    """Counts failed logins per email and per IP (accounts.ratelimit); past either limit
    every attempt is refused before the password is checked, the right one included."""

    rate_limited = False

    def clean(self):
        email = (self.cleaned_data.get("username") or "").strip().lower()
        limits = ratelimit.login_limits(self.request, email)
        wait = ratelimit.wait_for(limits)
        if wait:
            self.rate_limited = True
            raise ValidationError(ratelimit.too_many_message(wait), code="rate_limited")
        try:
            cleaned = super().clean()
        except ValidationError as exc:
            if getattr(exc, "code", None) == "invalid_login":
                for limit in limits:
                    limit.hit()
            raise
        limits[0].clear()  # the person got in: their own earlier typos no longer count
        return cleaned


class AdminLoginForm(RateLimitedLoginMixin, AdminAuthenticationForm):
    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)
        from accounts.profile.two_factor import two_factor_enabled

        # The admin's form has no code step: with two-factor sign-in on, the password alone
        # must not make a session (the dashboard's sign-in, with the code, reaches /admin/ too).
        if two_factor_enabled(user):
            raise ValidationError(
                "Two-factor sign-in is on for this account: log in at /login/ with your code, then open /admin/.",
                code="two_factor_required",
            )


class LoginForm(RateLimitedLoginMixin, AuthenticationForm):
    username = forms.EmailField(
        label="Email", widget=forms.EmailInput(attrs={"autofocus": True, "autocomplete": "email"})
    )

    error_messages = {
        "invalid_login": "That email and password do not match an account. Check both and try again.",
        "inactive": "This user has been deactivated. Ask your team's owner or support for help.",
    }


def _roles(grantable: list[str] | None):
    return [(value, label) for value, label in Role.choices if grantable is None or value in grantable]


class InviteForm(forms.Form):
    """`grantable`: the roles the inviting person may give (the others are not offered; the
    service refuses them anyway)."""

    email = forms.EmailField(label="Email address", widget=forms.EmailInput(attrs={"autocomplete": "off"}))
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def __init__(self, *args, grantable: list[str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["role"].choices = _roles(grantable)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)

    def __init__(self, *args, grantable: list[str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["role"].choices = _roles(grantable)


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100, label="Key name", help_text="e.g. the integration that will use it")
    # Not sent (an old form, a script): read, the smaller scope.
    # Short labels: the form fits a 375 px screen.
    scope = forms.ChoiceField(
        choices=[(KeyScope.READ, "Read"), (KeyScope.WRITE, "Write")],
        initial=KeyScope.READ,
        required=False,
        label="Scope",
        help_text="Read: search and chat. Write: also upload, delete, reindex.",
    )

    def clean_scope(self):
        return self.cleaned_data.get("scope") or KeyScope.READ


class AccountForm(forms.Form):
    name = forms.CharField(max_length=120, label="Team name")


class AccountDeleteForm(forms.Form):
    """The danger zone: the person types the account's name (the service checks it)."""

    confirm = forms.CharField(
        max_length=200,
        required=False,
        label="Type the account's name to confirm",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )


class ClaimPasswordResetForm(PasswordResetForm):
    """Django's "forgot password", also for a user nobody has signed in as yet (made by an
    identity provider's SCIM or an operator, without a password): the emailed link is how
    they set their first one. A user who signs in only with SSO still gets no link."""

    def get_users(self, email):
        from accounts.services.signup import user_is_unclaimed

        users = User.objects.filter(email__iexact=email, is_active=True)
        return (u for u in users if u.has_usable_password() or user_is_unclaimed(u))
