"""Writes for users, accounts, memberships, invitations and API keys: one module each;
this package exports every service under its old name (`accounts.services.account_create`)."""

from accounts.errors import AccountError  # raised by these services; tests catch it as services.AccountError
from accounts.services.api_keys import api_key_create, api_key_revoke, api_key_touch
from accounts.services.deletion import account_delete, account_delete_confirmation_check
from accounts.services.invitations import (
    INVITATION_SALT,
    invitation_accept,
    invitation_accept_by_id,
    invitation_cancel,
    invitation_decline,
    invitation_for_token,
    invitation_send,
    invitation_signup,
    member_invite,
)
from accounts.services.members import (
    ROLE_CHOICE_MESSAGE,
    member_access_end,
    member_add,
    member_change_role,
    member_manageable,
    member_remove,
    roles_grantable,
)
from accounts.services.signup import (
    account_create,
    signup,
    signup_claim_send,
    starting_credits_went_to,
    team_create,
    user_create,
    user_is_unclaimed,
    user_last_account_set,
)
from accounts.services.verification import VERIFY_SALT, email_verification_send, email_verification_token, email_verify
