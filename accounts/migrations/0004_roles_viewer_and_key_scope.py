# Roles gain "viewer"; API keys gain a scope. Keys that exist already become "write", the
# rights every key had until now, so no integration breaks.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_invitations_verified_email"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="scope",
            field=models.CharField(
                choices=[
                    ("read", "Read (search and chat)"),
                    ("write", "Read and write (also upload, delete, reindex)"),
                ],
                default="write",
                max_length=5,
            ),
        ),
        migrations.AlterField(
            model_name="invitation",
            name="role",
            field=models.CharField(
                choices=[("owner", "Owner"), ("admin", "Admin"), ("member", "Member"), ("viewer", "Viewer")],
                default="member",
                max_length=10,
            ),
        ),
        migrations.AlterField(
            model_name="membership",
            name="role",
            field=models.CharField(
                choices=[("owner", "Owner"), ("admin", "Admin"), ("member", "Member"), ("viewer", "Viewer")],
                default="member",
                max_length=10,
            ),
        ),
    ]
