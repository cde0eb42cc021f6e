"""The sources' errors: a stable `code` and a message a person can act on."""

from core.errors import GroundworkError, NotFound


class SourceError(GroundworkError):
    """A source that cannot be added or read as asked (a bad URL, a refused address, a page
    that could not be fetched). Raised at creation it is a 400; during a sync its message
    becomes the source's `error`."""


class AddressRefused(SourceError):
    """The host resolves to a private, loopback, link-local or reserved address, and
    SOURCES_ALLOWED_HOSTS does not allow it on that port (server-side request forgery)."""


class SourceNotFound(NotFound):
    """Missing, another account's, being deleted or malformed: one answer for all."""

    default_message = "There is no such source in this account."
