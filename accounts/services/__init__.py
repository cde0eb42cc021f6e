"""Writes for users, accounts, memberships, invitations and API keys: one module each;
this package exports every service under its old name (`accounts.services.account_create`)."""
from accounts.errors import AccountError  # raised by these services; tests catch it as services.AccountError
from accounts.services.signup import account_create, team_create, starting_credits_went_to, user_create, signup, signup_claim_send, user_is_unclaimed, user_last_account_set
from accounts.services.verification import VERIFY_SALT, email_verification_token, email_verification_send, email_verify
from accounts.services.members import roles_grantable, member_manageable, ROLE_CHOICE_MESSAGE, member_add, member_change_role, member_remove, member_access_end
from accounts.services.invitations import INVITATION_SALT, member_invite, invitation_send, invitation_for_token, invitation_accept, invitation_accept_by_id, invitation_signup, invitation_decline, invitation_cancel
from accounts.services.api_keys import api_key_create, api_key_revoke, api_key_touch
from accounts.services.deletion import account_delete_confirmation_check, account_delete
