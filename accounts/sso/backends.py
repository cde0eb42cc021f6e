"""The authentication backend of sessions signed in through single sign-on.

It authenticates nothing (`authenticate` is always None: the only way in is the callback,
accounts/sso/views.py, after the provider's ID token was checked); it is named on the session
by `login()` so the session says it signed in through SSO, and a later password login in the
same session (which rewrites the backend) cannot keep that mark.
"""

from django.contrib.auth.backends import ModelBackend


class SsoBackend(ModelBackend):
    def authenticate(self, request, **credentials):
        return None
