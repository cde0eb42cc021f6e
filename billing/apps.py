from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from accounts.signals import account_created
        from billing.services import starting_credits_grant

        account_created.connect(starting_credits_grant, dispatch_uid="billing.starting_credits")
