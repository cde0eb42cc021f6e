from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from accounts.signals import account_created, account_deleted, signup_email_verified
        from billing.lifecycle import account_billing_close
        from billing.services import starting_credits_grant

        # Operators' accounts get their credits at once; a sign-up's, when its email is verified.
        account_created.connect(starting_credits_grant, dispatch_uid="billing.starting_credits")
        signup_email_verified.connect(starting_credits_grant, dispatch_uid="billing.starting_credits_verified")
        # A deleted account's open holds are released; its budgets are purged by a job.
        account_deleted.connect(account_billing_close, dispatch_uid="billing.account_close")
