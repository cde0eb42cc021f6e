"""Operators: grant credits to an account, with a reason kept in the ledger."""

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Account
from billing.errors import BillingError
from billing.selectors import balance_get
from billing.services import credits_grant
from core.tenancy import account_context


class Command(BaseCommand):
    help = (
        "Grant N credits to ACCOUNT_ID (shown to owners and admins on the account's Team page as "
        '"Account id", and in the admin\'s account list). A reason is required and recorded.'
    )

    def add_arguments(self, parser):
        parser.add_argument("account_id", type=int, help="The account's id, e.g. 123 (Team page, admin)")
        parser.add_argument("amount", type=int)
        parser.add_argument("--reason", required=True, help="Why, e.g. 'annual plan renewal'")
        parser.add_argument("--key", help="Idempotency key: the same key twice grants once")

    def handle(self, *args, account_id, amount, reason, key=None, **opts):
        account = Account.objects.filter(pk=account_id).first()
        if account is None:
            raise CommandError(f"No account has id {account_id}.")
        try:
            with account_context(account):
                entry = credits_grant(account=account, amount=amount, reason=reason, key=key)
                balance = balance_get(account=account)
        except BillingError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Granted {entry.delta:,} credits to {account.name} (id {account.pk}). Balance: {balance:,}."
            )
        )
