from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from accounts.signals import account_deleted
        from chat.jobs import account_conversations_purge

        # A deleted account's conversations and messages are purged by a job.
        account_deleted.connect(account_conversations_purge, dispatch_uid="chat.account_purge")
