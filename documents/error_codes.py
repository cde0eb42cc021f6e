"""documents's error codes, each named once (docs/architecture.md, "Where to add … an error")."""

from enum import StrEnum


class DocumentErrorCode(StrEnum):
    ARCHIVE_BOMB = "archive_bomb"
    BAD_ENCODING = "bad_encoding"
    COLLECTION_NOT_EMPTY = "collection_not_empty"
    CORRUPT_FILE = "corrupt_file"
    DEFAULT_COLLECTION = "default_collection"
    DUPLICATE_NAME = "duplicate_name"
    EMBEDDING_MODEL_CHANGED = "embedding_model_changed"
    EMPTY_FILE = "empty_file"
    ENCRYPTED_PDF = "encrypted_pdf"
    IMAGE_TOO_LARGE = "image_too_large"
    INTERNAL_ERROR = "internal_error"
    INVALID_ACCESS = "invalid_access"
    INVALID_TAGS = "invalid_tags"
    NO_FILE = "no_file"
    NO_TEXT = "no_text"
    PARSE_FAILED = "parse_failed"
    PARSE_FAILED_RESOURCES = "parse_failed_resources"
    PARSE_TIMEOUT = "parse_timeout"
    STORAGE_FULL = "storage_full"
    TOO_MANY_CELLS = "too_many_cells"
    TYPE_MISMATCH = "type_mismatch"
    UNSUPPORTED_TYPE = "unsupported_type"
