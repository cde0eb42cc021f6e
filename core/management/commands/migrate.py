"""`manage.py migrate`, as the schema's owner (core/db_owner.py).

One node at a time: all of it holds the database's migration lock (core/db_owner.py), so
nodes that start together wait for each other. Before Django's migrate: the signed
row-level-security context and its key. After: the app's role is granted rows on every
table, and nothing more.
"""

from django.core.management.commands.migrate import Command as DjangoMigrate

from core.db_owner import app_role_grant, as_database_owner, context_install, migration_lock


class Command(DjangoMigrate):
    help = DjangoMigrate.help + " Runs as the schema's owner role (DATABASE_OWNER_URL)."

    def handle(self, *args, **options):
        with migration_lock(options["database"]), as_database_owner(options["database"]) as conn:
            context_install(conn)
            super().handle(*args, **options)
            app_role_grant(conn)
