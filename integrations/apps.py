from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    """Protocols other tools reach the knowledge base through: the MCP server at /mcp."""

    name = "integrations"
    default_auto_field = "django.db.models.BigAutoField"
