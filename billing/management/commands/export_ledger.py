"""Operators: one account's ledger for one month, as CSV (to a file or standard output)."""

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Account
from audit.actors import Actor
from audit.models import ActorKind
from billing.operators import EXPORT_COLUMNS, MonthError, ledger_export_csv, month_parse
from core.tenancy import account_context


class Command(BaseCommand):
    help = (
        f"Write account ID's ledger for one month as CSV ({', '.join(EXPORT_COLUMNS)}; UTC). "
        "The account id is on the account's Team page (owners and admins) and in the admin's account list. "
        "Audited in the account's log (Ledger exported)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--account", type=int, required=True, help="The account's id, e.g. 123")
        parser.add_argument("--month", required=True, help="YYYY-MM, e.g. 2026-11")
        parser.add_argument("--output", help="A file to write (default: standard output)")

    def handle(self, *args, account, month, output=None, **opts):
        found = Account.objects.filter(pk=account).first()
        if found is None:
            raise CommandError(f"No account has id {account}.")
        try:
            month_parse(month)
        except MonthError as exc:
            raise CommandError(str(exc)) from exc
        actor = Actor(ActorKind.SYSTEM, None, "manage.py export_ledger")
        out = open(output, "w", newline="", encoding="utf-8") if output else self.stdout
        try:
            with account_context(found):
                rows = ledger_export_csv(account=found, month=month, out=out, actor=actor)
        finally:
            if output:
                out.close()
        if output:
            self.stderr.write(f"Wrote {rows:,} ledger entries of {found.name} (id {found.pk}) for {month} to {output}.")
