"""SCIM's error: what RFC 7644 §3.12 answers with (`status`, `scimType`, `detail`)."""

from __future__ import annotations

from enum import StrEnum


class ScimType(StrEnum):
    """RFC 7644 §3.12's `scimType` values this service provider answers with."""

    INVALID_FILTER = "invalidFilter"
    INVALID_SYNTAX = "invalidSyntax"
    INVALID_PATH = "invalidPath"
    INVALID_VALUE = "invalidValue"
    MUTABILITY = "mutability"
    UNIQUENESS = "uniqueness"
    NO_TARGET = "noTarget"


class ScimError(Exception):
    """A refused SCIM request: HTTP `status`, an optional `scim_type`, a `detail` a person
    reading the identity provider's log can act on."""

    def __init__(self, status: int, detail: str, scim_type: ScimType | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.scim_type = scim_type
