"""An operator turns off a person's two-factor sign-in (their phone and recovery codes lost)."""

from django.core.management.base import BaseCommand, CommandError

from accounts.models import User
from accounts.profile.two_factor import two_factor_reset


class Command(BaseCommand):
    help = (
        "Turn off two-factor sign-in for EMAIL (after checking who is asking): their password alone signs "
        "them in again. Audited in each of their teams."
    )

    def add_arguments(self, parser):
        parser.add_argument("email")

    def handle(self, *args, email, **opts):
        user = User.objects.filter(email__iexact=email.strip()).first()
        if user is None:
            raise CommandError(f"No user has the address {email}.")
        if two_factor_reset(user=user):
            self.stdout.write(
                f"Two-factor sign-in is off for {user.email}: they sign in with their password and "
                "can set it up again on their settings page."
            )
        else:
            self.stdout.write(f"Two-factor sign-in was not on for {user.email}; nothing changed.")
