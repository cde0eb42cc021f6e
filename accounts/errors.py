"""The accounts domain's error: a GroundworkError (stable code, message, status, field)."""

from core.errors import GroundworkError


class AccountError(GroundworkError):
    """Sign-up, team and API-key failures."""
