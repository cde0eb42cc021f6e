"""sources's error codes, each named once (docs/architecture.md, "Where to add … an error")."""

from enum import StrEnum


class SourceErrorCode(StrEnum):
    ADDRESS_REFUSED = "address_refused"
    FETCH_FAILED = "fetch_failed"
    INVALID_SCHEDULE = "invalid_schedule"
    INVALID_URL = "invalid_url"
    INVALID_MAX_PAGES = "invalid_max_pages"
    INVALID_OPTION = "invalid_option"
    ROBOTS_DISALLOWED = "robots_disallowed"
    SYNC_FAILED = "sync_failed"
