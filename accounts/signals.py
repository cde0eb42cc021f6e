"""What accounts/ announces to the apps above it, which it must not import.

`account_created(account, initial_credits)`: sent inside account_create's transaction;
billing grants the starting credits (billing.services.starting_credits_grant), so a new
account and its credits are committed together or not at all.

`signup_email_verified(account, initial_credits)`: sent, inside the account's context, when
the person who made `account` at sign-up verifies their email address; billing pays the
starting credits then (the same receiver: once per account by its idempotency key). A
sign-up's account_created carries initial_credits=0.

`account_deleted(account, actor)`: sent inside account_delete's transaction, in the account's
context, after its keys, memberships and invitations are gone. Each app that owns the
account's data answers it: billing releases the open holds, and each app enqueues (on
commit) the job that purges its own rows and files (documents, chat, billing's budgets).

`principal_access_ended(account_id, user_id=None, api_key_id=None)`: sent inside the
transaction that removes a member or revokes a key; documents deletes the principal's
access to restricted collections in the same transaction.
"""

from django.dispatch import Signal

account_created = Signal()
signup_email_verified = Signal()
account_deleted = Signal()
principal_access_ended = Signal()
