"""Single sign-on through an OpenID Connect provider (docs/operations/sso.md).

`oidc` speaks to the provider (through authlib), `services` decides who a verified identity
signs in as, `session` says how a session signed in, `views` and `urls` are the two pages
(`/sso/login/`, `/sso/callback/`) and the owner's switch, `backends` marks SSO sessions.
"""
