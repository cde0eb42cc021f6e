"""Operators: create an account with its owner (and optionally credits and an API key)."""

import json
import secrets

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts import services
from accounts.errors import AccountError
from accounts.models import User
from billing.selectors import balance_get
from core.error_codes import CoreErrorCode
from core.tenancy import account_context


class Command(BaseCommand):
    help = "Create an account owned by EMAIL. Prints the new account id (or one JSON object with --json)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="The account's display name")
        parser.add_argument("--owner", required=True, help="Owner's email; an existing user is reused")
        parser.add_argument("--password", help="Password for a new owner (generated and printed if omitted)")
        parser.add_argument("--credits", type=int, default=None, help="Starting credits (default: SIGNUP_CREDITS)")
        parser.add_argument("--api-key", action="store_true", help="Also create an API key and print it once")
        parser.add_argument("--json", action="store_true", help="Print one JSON object")

    def handle(self, *args, **opts):
        try:
            result = self._create(opts)
        except AccountError as exc:
            raise CommandError(exc.message) from exc
        if opts["json"]:
            self.stdout.write(json.dumps(result))
            return
        self.stdout.write(self.style.SUCCESS(f"Created account {result['account_id']} owned by {result['owner']}."))
        if "password" in result:
            self.stdout.write(f"Owner password: {result['password']}")
        if "api_key" in result:
            self.stdout.write(f"API key (shown once): {result['api_key']}")
        self.stdout.write(f"Balance: {result['balance']} credits")

    @transaction.atomic
    def _create(self, opts) -> dict:
        if opts["credits"] is not None and opts["credits"] < 0:
            raise AccountError(CoreErrorCode.BAD_REQUEST, "--credits must be zero or more.")
        result = {}
        owner = User.objects.filter(email__iexact=opts["owner"].strip()).first()
        if owner is None:
            password = opts["password"] or secrets.token_urlsafe(12)
            owner = services.user_create(email=opts["owner"], password=password)
            if not opts["password"]:
                result["password"] = password
        elif opts["password"]:
            raise AccountError(
                CoreErrorCode.BAD_REQUEST,
                f"{owner.email} already exists; its password was left unchanged. Omit --password.",
            )
        account = services.account_create(name=opts["name"], owner=owner, initial_credits=opts["credits"])
        result.update({"account_id": account.pk, "owner": owner.email})
        with account_context(account):
            if opts["api_key"]:
                _, raw = services.api_key_create(account=account, actor=None, name="create_account")
                result["api_key"] = raw
            result["balance"] = balance_get(account=account)
        return result
