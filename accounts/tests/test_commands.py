import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from accounts.models import User


def _run(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_account_json_with_api_key(client, db):
    result = json.loads(
        _run(
            "create_account",
            "Acme Corp",
            "--owner",
            "ops@acme.test",
            "--password",
            "Sturdy-pass-123",
            "--api-key",
            "--json",
        )
    )
    assert set(result) >= {"account_id", "owner", "api_key", "balance"}
    assert result["owner"] == "ops@acme.test" and result["api_key"].startswith("gw_")
    assert (
        client.get("/api/v1/account/", HTTP_AUTHORIZATION=f"Bearer {result['api_key']}").json()["id"]
        == result["account_id"]
    )
    assert client.login(username="ops@acme.test", password="Sturdy-pass-123")


def test_create_account_without_password_prints_a_generated_one(db):
    result = json.loads(_run("create_account", "Solo", "--owner", "solo@x.test", "--json"))
    assert "api_key" not in result and len(result["password"]) >= 12
    user = User.objects.get(email="solo@x.test")
    assert user.check_password(result["password"])


def test_create_account_reuses_an_existing_owner(db):
    first = json.loads(_run("create_account", "One", "--owner", "o@x.test", "--json"))
    second = json.loads(_run("create_account", "Two", "--owner", "O@x.test", "--json"))
    assert first["account_id"] != second["account_id"]
    assert User.objects.count() == 1
    with pytest.raises(CommandError, match="already exists"):
        _run("create_account", "Three", "--owner", "o@x.test", "--password", "Another-pass-1")


def test_create_account_bad_email_is_a_clear_error(db):
    with pytest.raises(CommandError, match="valid email"):
        _run("create_account", "X", "--owner", "nope")
    assert not User.objects.exists()


def test_ensure_demo_is_idempotent(db, settings):
    settings.DEMO_PASSWORD = ""
    first = _run("ensure_demo")
    password = first.split(" / ")[1].split()[0]
    assert User.objects.get(email="demo@example.com").check_password(password)
    second = _run("ensure_demo")
    assert password not in second and User.objects.count() == 1
    settings.DEMO_PASSWORD = "Chosen-demo-pass-1"
    _run("ensure_demo")
    assert User.objects.get().check_password("Chosen-demo-pass-1")
