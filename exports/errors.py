"""The export's one error type: a stable `code` and a message a person can act on."""

from core.errors import GroundworkError, NotFound


class ExportError(GroundworkError):
    """Requesting or downloading an export failed (HTTP `status`)."""


class ExportRefused(ExportError):
    """The export would exceed a limit: it is refused whole, never cut short."""

    status = 422


class ExportNotFound(NotFound, ExportError):
    """Missing, another person's or a malformed id: one answer for all (core.errors.NotFound)."""

    default_message = "There is no such export."
