"""`make run`: make sure the demo account exists and say how to log in."""

import secrets

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection, transaction

from accounts import services
from accounts.models import User

DEMO_EMAIL = "demo@example.com"


class Command(BaseCommand):
    help = "Create the demo account (owner demo@example.com) if it does not exist."

    @transaction.atomic
    def handle(self, *args, **opts):
        password = settings.DEMO_PASSWORD
        # NOTE: two nodes' `make run` start at once against one database: without this lock
        # both find no demo user and the second sign-up fails on the unique email.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('groundwork:ensure_demo'))")
        user = User.objects.filter(email__iexact=DEMO_EMAIL).first()
        if user is None:
            password = password or secrets.token_urlsafe(9)
            services.signup(
                email=DEMO_EMAIL,
                password=password,
                account_name="Demo team",
                full_name="Demo User",
                email_verified=True,
            )  # the operator vouches for it: credits at once
            self.stdout.write(f"Demo login: {DEMO_EMAIL} / {password}  (shown once; set DEMO_PASSWORD to choose it)")
        elif password:
            user.set_password(password)
            user.save(update_fields=["password"])
            self.stdout.write(f"Demo login: {DEMO_EMAIL} / {password}  (from DEMO_PASSWORD)")
        else:
            self.stdout.write(f"Demo login: {DEMO_EMAIL} (password as printed on the first run, or set DEMO_PASSWORD)")
