"""The ingestion pipeline's two error types, each with a stable `code` and a `message`
a person can act on. Both pickle cleanly (their args are their constructor arguments),
so they can cross a process boundary unchanged."""
from __future__ import annotations


class UploadRejected(Exception):
    """The upload itself is refused before anything is stored (HTTP `status`)."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(code, message, status)
        self.code = code
        self.message = message
        self.status = status

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class IngestionError(Exception):
    """A stored file could not be turned into text; `message` is shown to the uploader."""

    def __init__(self, code: str, message: str):
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
