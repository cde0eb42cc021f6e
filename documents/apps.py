from django.apps import AppConfig


class DocumentsConfig(AppConfig):
    name = "documents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from accounts.signals import account_created
        from documents.services import collections_for_new_account

        # Every new account starts with its default collection ("General").
        account_created.connect(collections_for_new_account, dispatch_uid="documents.default_collection")
