"""Verified domains: mail domains an account's owners proved it controls (a link emailed to
admin@ or postmaster@ of the domain). A SCIM token adds existing users with such an address
at once; anyone else who already uses Groundwork is invited (accounts/scim/services.py)."""
