"""The ingestion pipeline's two errors, each a GroundworkError with a stable `code` and a
`message` a person can act on. They cross the parser sandbox's process boundary unchanged
(GroundworkError pickles with every attribute)."""
from core.errors import GroundworkError


class UploadRejected(GroundworkError):
    """The upload itself is refused before anything is stored (HTTP `status`)."""


class IngestionError(GroundworkError):
    """A stored file could not be turned into text; `message` is shown to the uploader."""
