from django.db import migrations

from core.rls import enable_rls


class Migration(migrations.Migration):
    dependencies = [("chat", "0001_initial")]

    operations = [
        enable_rls("chat_conversation"),
        enable_rls("chat_message"),
    ]
