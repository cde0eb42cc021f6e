"""accounts's error codes, each named once (docs/architecture.md, "Where to add … an error")."""
from enum import StrEnum


class AccountErrorCode(StrEnum):
    ACCOUNT_DELETED = "account_deleted"
    ALREADY_INVITED = "already_invited"
    ALREADY_MEMBER = "already_member"
    CONFIRMATION_MISMATCH = "confirmation_mismatch"
    CONFIRMATION_REQUIRED = "confirmation_required"
    DUPLICATE_EMAIL = "duplicate_email"
    DUPLICATE_SLUG = "duplicate_slug"
    INVALID_ROLE = "invalid_role"
    INVALID_SCOPE = "invalid_scope"
    INVALID_SLUG = "invalid_slug"
    INVITATION_EXPIRED = "invitation_expired"
    INVITATION_INVALID = "invitation_invalid"
    INVITATION_USED = "invitation_used"
    LAST_OWNER = "last_owner"
    LINK_EXPIRED = "link_expired"
    LINK_INVALID = "link_invalid"
    TOO_MANY_TEAMS = "too_many_teams"
    WEAK_PASSWORD = "weak_password"
    WRONG_USER = "wrong_user"
