from django.apps import AppConfig


class SourcesConfig(AppConfig):
    name = "sources"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from accounts.signals import account_deleted
        from documents import source_links
        from sources.selectors import sources_of_current_account
        from sources.services import account_sources_withdraw

        # A deleted account's sources go with it (documents purges their documents).
        account_deleted.connect(account_sources_withdraw, dispatch_uid="sources.account_withdraw")
        # The document API's `"source": {"id", "url"}` (documents never names this app).
        source_links.register(sources_of_current_account)
