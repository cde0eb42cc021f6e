"""Names typed before control characters were refused (core/text.py): a team name or a
person's name with a line break split invitation emails' subjects. Such characters become
spaces, once."""

import re

from django.db import migrations

# Escapes, not the characters: PostgreSQL's regular expressions read them the same way (and
# a text parameter cannot hold NUL, which a PostgreSQL text column never holds anyway).
_PATTERN = r"[\x01-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]"
_CONTROL = re.compile(_PATTERN)


def _clean(apps, schema_editor):
    for model, field in (("Account", "name"), ("User", "full_name")):
        Model = apps.get_model("accounts", model)
        for row in Model.objects.filter(**{f"{field}__regex": _PATTERN}).only("pk", field):
            setattr(row, field, " ".join(_CONTROL.sub(" ", getattr(row, field)).split()) or "Team")
            row.save(update_fields=[field])


class Migration(migrations.Migration):
    dependencies = [("accounts", "0007_starting_credits_once")]

    operations = [migrations.RunPython(_clean, migrations.RunPython.noop)]
