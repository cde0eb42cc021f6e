"""Single sign-on's error: an AccountError whose code is an SsoErrorCode."""

from accounts.errors import AccountError


class SsoError(AccountError):
    """A sign-in through the provider that did not happen: shown on the login page, logged."""
