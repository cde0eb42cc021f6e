"""What accounts/ announces to the apps above it, which it must not import.

`account_created(account, initial_credits)`: sent inside account_create's transaction;
billing grants the starting credits (billing.services.starting_credits_grant), so a new
account and its credits are committed together or not at all.
"""
from django.dispatch import Signal

account_created = Signal()
