"""Production settings are safe by default: no secret default, secure cookies, HSTS."""

import json
import os
import subprocess
import sys

from config.embedded import BASE_DIR

PROBE = (
    "import json, django; from django.conf import settings; django.setup();"
    "print(json.dumps({'storage': settings.STORAGES['default']['BACKEND'], **{k: getattr(settings, k) for k in ('SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE',"
    " 'SECURE_HSTS_SECONDS', 'ALLOWED_HOSTS', 'SECURE_SSL_REDIRECT', 'DEBUG', 'RAG_TOP_K', 'EMAIL_BACKEND',"
    " 'SIGNUP_CREDITS')}}))"
)


def _settings(**overrides):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GROUNDWORK_TESTING", "GROUNDWORK_LOCAL", "SECRET_KEY", "DEBUG", "SIGNUP_CREDITS")
    }
    env.update(DJANGO_SETTINGS_MODULE="config.settings", **overrides)
    return subprocess.run([sys.executable, "-c", PROBE], cwd=BASE_DIR, env=env, capture_output=True, text=True)


def test_secret_key_is_required_without_debug():
    result = _settings()
    assert result.returncode != 0
    assert "SECRET_KEY is required" in result.stderr


def test_production_defaults_are_locked_down():
    result = _settings(SECRET_KEY="s" * 50, ALLOWED_HOSTS="app.example.com", RAG_TOP_K="7")
    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    assert values["SESSION_COOKIE_SECURE"] and values["CSRF_COOKIE_SECURE"] and values["SECURE_SSL_REDIRECT"]
    assert values["SECURE_HSTS_SECONDS"] >= 31536000
    assert values["ALLOWED_HOSTS"] == ["app.example.com"] and values["DEBUG"] is False
    assert values["RAG_TOP_K"] == 7 and values["EMAIL_BACKEND"].endswith("smtp.EmailBackend")


def test_os_environment_wins_over_dotenv(tmp_path):
    dotenv = tmp_path / ".env"
    dotenv.write_text("RAG_TOP_K=3\nSECRET_KEY=from-dotenv-secret\n")
    from_file = json.loads(_settings(ALLOWED_HOSTS="x", GROUNDWORK_ENV_FILE=str(dotenv)).stdout)
    assert from_file["RAG_TOP_K"] == 3
    from_env = json.loads(_settings(ALLOWED_HOSTS="x", GROUNDWORK_ENV_FILE=str(dotenv), RAG_TOP_K="9").stdout)
    assert from_env["RAG_TOP_K"] == 9


def test_uploads_go_to_a_bucket_when_one_is_configured():
    local = json.loads(_settings(DEBUG="1").stdout)
    assert local["storage"] == "django.core.files.storage.FileSystemStorage"
    bucket = json.loads(
        _settings(DEBUG="1", STORAGE_BUCKET="groundwork-docs", STORAGE_ENDPOINT_URL="http://127.0.0.1:9000").stdout
    )
    assert bucket["storage"] == "storages.backends.s3.S3Storage"


def test_settings_are_composed_once():
    """Each setting is declared whole where it stands: no module-level statement patches a
    setting after its declaration (MIDDLEWARE.insert, REST_FRAMEWORK[...] = ..., .append,
    .update), and none is assigned twice at the top level (branches of one if/else aside)."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[1] / "settings.py").read_text())
    patched, assigned = [], {}
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id.isupper():
                patched.append(f"line {node.lineno}: {func.value.id}.{func.attr}(...)")
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.value, ast.Name)
                    and target.value.id.isupper()
                ):
                    patched.append(f"line {node.lineno}: {target.value.id}[...] = ...")
                if isinstance(target, ast.Name) and target.id.isupper():
                    assigned.setdefault(target.id, []).append(node.lineno)
    twice = {name: lines for name, lines in assigned.items() if len(lines) > 1}
    assert patched == [] and twice == {}


def test_a_new_team_starts_with_enough_credits_for_a_real_pdf():
    """Found from outside: 10,000 starting credits could not index a 52-page PDF (about 690
    credits a page). The default is 150,000: about 100 PDF pages and 50 questions (docs/guide/credits.md)."""
    values = json.loads(_settings(DEBUG="1").stdout)
    assert values["SIGNUP_CREDITS"] == 150_000
