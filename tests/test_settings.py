"""Settings helpers fail loudly on a bad value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from history_app import settings as app_settings

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("value", ["maybe", "2", "tru"])
def test_a_bad_boolean_is_refused(monkeypatch, value):
    monkeypatch.setenv("DEBUG", value)
    with pytest.raises(ImproperlyConfigured, match="DEBUG"):
        app_settings.env_bool("DEBUG", False)


def test_booleans_and_integers(monkeypatch):
    monkeypatch.setenv("X_FLAG", "yes")
    monkeypatch.setenv("X_SIZE", "12")
    assert app_settings.env_bool("X_FLAG", False) is True
    assert app_settings.env_int("X_SIZE", 1) == 12
    monkeypatch.setenv("X_SIZE", "twelve")
    with pytest.raises(ImproperlyConfigured, match="X_SIZE"):
        app_settings.env_int("X_SIZE", 1)
    monkeypatch.setenv("X_SIZE", "-1")
    with pytest.raises(ImproperlyConfigured, match="at least"):
        app_settings.env_int("X_SIZE", 1, minimum=0)


def test_values_can_come_from_a_file(monkeypatch, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    monkeypatch.delenv("X_SECRET", raising=False)
    monkeypatch.setenv("X_SECRET_FILE", str(secret))
    assert app_settings.env_str("X_SECRET") == "from-a-file"
    monkeypatch.setenv("X_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="cannot be read"):
        app_settings.env_str("X_SECRET")


def test_lists(monkeypatch):
    monkeypatch.setenv("X_HOSTS", "a.example, b.example,,")
    assert app_settings.env_list("X_HOSTS", []) == ["a.example", "b.example"]


PRODUCTION = {
    "SECRET_KEY": "a-production-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz-ABCDEFG",
    "ALLOWED_HOSTS": "history.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://history.example.com",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    "HISTORY_BEHIND_HTTPS_PROXY": "true",
}


def check_deploy(tmp_path, **variables) -> subprocess.CompletedProcess:
    keep = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**keep, "HISTORY_DATA_DIR": str(tmp_path), **variables},
        capture_output=True,
        text=True,
    )


def test_check_deploy_is_clean_with_the_documented_production_variables(tmp_path):
    result = check_deploy(tmp_path, **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout
    assert "WARNINGS" not in result.stderr


def test_a_laptop_stays_plain_http(tmp_path, settings, client):
    assert not settings.SECURE_SSL_REDIRECT and settings.SECURE_HSTS_SECONDS == 0
    assert settings.SECURE_PROXY_SSL_HEADER is None
    assert client.get("/accounts/login/").status_code == 200  # no redirect to https
    result = check_deploy(tmp_path)
    assert "security.W004" in result.stderr and "security.W008" in result.stderr  # the checks still guard


def test_a_sqlite_database_named_in_database_url_gets_the_same_options(tmp_path):
    """WAL, IMMEDIATE, the busy timeout… for every SQLite database, however it is named."""
    import json
    import os
    import subprocess
    import sys

    script = (
        "import json; from django.conf import settings; "
        "print(json.dumps(settings.DATABASES['default'].get('OPTIONS', {})))"
    )
    answers = []
    for url in (None, f"sqlite:///{tmp_path / 'named.sqlite3'}"):
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "history_app.settings",
            "HISTORY_DATA_DIR": str(tmp_path),
        }
        env.pop("DATABASE_URL", None)
        if url:
            env["DATABASE_URL"] = url
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        answers.append(json.loads(out.stdout))
    default, named = answers
    assert named == default
    assert named["transaction_mode"] == "IMMEDIATE" and named["timeout"] == 20
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", "busy_timeout=20000"):
        assert pragma in named["init_command"]
