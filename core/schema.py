"""OpenAPI descriptions of the two ways to authenticate (drf-spectacular extensions)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "core.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "gw_…",
            "description": "An API key from Team settings: `Authorization: Bearer gw_…`",
        }


class SessionScheme(OpenApiAuthenticationExtension):
    target_class = "core.authentication.AccountSessionAuthentication"
    name = "session"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "cookie",
            "name": "sessionid",
            "description": "The dashboard session; unsafe methods also need the CSRF token.",
        }
