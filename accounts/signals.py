"""What accounts/ announces to the apps above it, which it must not import.

`account_created(account, initial_credits)`: sent inside account_create's transaction;
billing grants the starting credits (billing.services.starting_credits_grant), so a new
account and its credits are committed together or not at all.

`signup_email_verified(account, initial_credits)`: sent, inside the account's context, when
the person who made `account` at sign-up verifies their email address; billing pays the
starting credits then (the same receiver: once per account by its idempotency key). A
sign-up's account_created carries initial_credits=0.
"""
from django.dispatch import Signal

account_created = Signal()
signup_email_verified = Signal()
