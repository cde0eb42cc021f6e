"""`manage.py migrate`, as the schema's owner (core/db_owner.py).

Before Django's migrate: the signed row-level-security context and its key. After: the
app's role is granted rows on every table, and nothing more.
"""
from django.core.management.commands.migrate import Command as DjangoMigrate

from core.db_owner import app_role_grant, as_database_owner, context_install


class Command(DjangoMigrate):
    help = DjangoMigrate.help + " Runs as the schema's owner role (DATABASE_OWNER_URL)."

    def handle(self, *args, **options):
        with as_database_owner(options["database"]) as conn:
            context_install(conn)
            super().handle(*args, **options)
            app_role_grant(conn)
