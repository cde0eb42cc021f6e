"""llm's error codes, each named once (docs/architecture.md, "Where to add … an error")."""

from enum import StrEnum


class ProviderErrorCode(StrEnum):
    EMBEDDING_DIMENSION = "embedding_dimension"
    PROVIDER_ERROR = "provider_error"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
