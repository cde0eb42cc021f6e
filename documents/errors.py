"""The ingestion pipeline's two errors, each a GroundworkError with a stable `code` and a
`message` a person can act on. They cross the parser sandbox's process boundary unchanged
(GroundworkError pickles with every attribute)."""

from core.errors import GroundworkError
from core.errors import NotFound as _NotFound


class UploadRejected(GroundworkError):
    """The upload itself is refused before anything is stored (HTTP `status`)."""


class IngestionError(GroundworkError):
    """A stored file could not be turned into text; `message` is shown to the uploader."""


class NotFound(_NotFound):
    """Missing, another account's, or (for a document) being deleted (core.errors.NotFound).
    No Django import here: the parser sandbox imports this module without Django."""


class DocumentNotFound(NotFound):
    default_message = "There is no such document in this account."


class ReindexRunNotFound(NotFound):
    default_message = "There is no such reindex run in this account."


class CollectionNotFound(NotFound):
    default_message = "There is no such collection in this account."


class CollectionError(GroundworkError):
    """A collection change that cannot be made as asked (a duplicate name, a non-empty
    collection to delete, the default collection restricted or deleted)."""


class TagsInvalid(GroundworkError):
    """Tags that break documents/tags.py's rules (400 `invalid_tags`, naming the field)."""
