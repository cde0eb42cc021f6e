"""Security headers Django 5.2 does not set itself: the Content-Security-Policy.

(X-Content-Type-Options, Referrer-Policy, X-Frame-Options and, with DEBUG off, HSTS and the
secure cookies come from Django's SecurityMiddleware and settings.)

The policy is `settings.CONTENT_SECURITY_POLICY`: scripts, styles, connections (the chat
websocket is same-origin) and everything else only from this origin; no inline script,
event handler or style attribute anywhere (templates and static/js hold none; a test keeps
it so), no plugins, no <base>, no framing. Pages written by libraries (Django 5.2's admin,
drf-spectacular's Swagger UI page) carry some inline style, so those paths alone also
allow inline style; their scripts stay external like ours.
"""

from __future__ import annotations

from django.conf import settings

HEADER = "Content-Security-Policy"
INLINE_STYLE_PATHS = ("/admin/", "/api/docs/")


def policy_for(path: str) -> str:
    policy = settings.CONTENT_SECURITY_POLICY
    if path.startswith(INLINE_STYLE_PATHS):
        policy = policy.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
    return policy


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if settings.CONTENT_SECURITY_POLICY and HEADER not in response:
            response[HEADER] = policy_for(request.path_info)
        return response
