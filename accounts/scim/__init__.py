"""SCIM 2.0 provisioning (RFC 7643/7644) at /scim/v2/: an identity provider (Okta, Entra ID)
adds, updates and deprovisions an account's members with the account's SCIM token."""
