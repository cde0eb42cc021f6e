from django.db import migrations

from core.rls import enable_rls


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    operations = [
        # A signed-in user reads their own memberships in every account (the switcher).
        enable_rls(
            "accounts_membership",
            extra_policies={
                "membership_self_read": (
                    "SELECT",
                    "user_id = NULLIF(current_setting('app.user_id', true), '')::bigint",
                ),
            },
        ),
        enable_rls("accounts_invitation"),
        # Authentication reads the one key whose hash it computed from the presented secret.
        enable_rls(
            "accounts_apikey",
            extra_policies={
                "apikey_by_hash": ("SELECT", "key_hash = NULLIF(current_setting('app.api_key_hash', true), '')"),
            },
        ),
    ]
