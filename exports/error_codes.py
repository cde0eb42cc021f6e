"""exports's error codes, each named once (docs/architecture.md, "Where to add … an error")."""

from enum import StrEnum


class ExportErrorCode(StrEnum):
    EXPORT_EXPIRED = "export_expired"
    EXPORT_FAILED = "export_failed"
    EXPORT_NOT_READY = "export_not_ready"
