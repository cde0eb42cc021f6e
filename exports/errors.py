"""The export's one error type: a stable `code` and a message a person can act on."""
from core.errors import GroundworkError


class ExportError(GroundworkError):
    """Requesting or downloading an export failed (HTTP `status`)."""


class ExportRefused(ExportError):
    """The export would exceed a limit: it is refused whole, never cut short."""

    status = 422


class ExportNotFound(ExportError):
    """Missing, or another person's: one answer for both."""

    status = 404

    def __init__(self):
        super().__init__("not_found", "There is no such export.")
