from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The ground floor: tenancy, the one error type and the API platform. Imports no app."""

    name = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from core import schema  # noqa: F401  (registers the OpenAPI auth schemes)
