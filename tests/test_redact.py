"""The redactor against the secret and look-alike corpora (tests/fixtures/corpora)."""

from __future__ import annotations

import json
import time

import pytest

from history_app.agent_history import Redactor, is_secret_key, redact

from .conftest import load_jsonl

SECRETS = load_jsonl("secrets.jsonl")
INNOCUOUS = load_jsonl("innocuous.jsonl")


@pytest.mark.parametrize("entry", SECRETS, ids=lambda e: e["kind"])
def test_every_secret_is_removed_in_every_placement(entry):
    for placement in entry["placements"]:
        cleaned, counts = Redactor().redact_with_counts(placement)
        text = json.dumps(cleaned, ensure_ascii=False)
        assert entry["secret"] not in text, placement["where"]
        assert entry["secret"] not in str(cleaned)
        assert sum(counts.values()) >= 1


@pytest.mark.parametrize("entry", INNOCUOUS, ids=lambda e: e.get("key") or e.get("text")[:20])
def test_innocuous_values_are_untouched(entry):
    assert redact(entry) == entry
    if "key" in entry:
        assert redact({entry["key"]: entry["value"]}) == {entry["key"]: entry["value"]}


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "apiKey",
        "x-api-key",
        "GITHUB_TOKEN",
        "clientSecret",
        "Authorization",
        "Cookie",
        "db_password",
        "private_key",
        "AWS_SECRET_ACCESS_KEY",
        "pwd",
        "STRIPE_KEY",
    ],
)
def test_secret_key_names(key):
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "session_id",
        "max_tokens",
        "total_tokens",
        "token_count",
        "author",
        "passage",
        "compass",
        "secretary",
        "bypass_cache",
        "keyboard_layout",
        "key",
        "sort_key",
        "auth_method",
    ],
)
def test_innocuous_key_names(key):
    assert not is_secret_key(key)


def test_values_under_secret_keys_are_replaced_at_any_depth_but_numbers_kept():
    data = {"a": [{"b": {"password": "hunter2", "time_to_first_token": 0.4}}]}
    assert redact(data) == {"a": [{"b": {"password": "[REDACTED:secret-key]", "time_to_first_token": 0.4}}]}


def test_prose_is_not_mangled():
    text = "The task-manager2024 app needs a passport; the bearer of this letter asks for a token count."
    assert redact(text) == text


def test_key_value_pairs_in_text_keep_their_names():
    out = redact(
        "plain api_key=plainFAKE123 and 'password': 'FAKE-pw' and DATABASE_URL=postgres://u:FAKEpw@h/db"
    )
    assert out == (
        "plain api_key=[REDACTED:key-value] and 'password': '[REDACTED:key-value]' and "
        "DATABASE_URL=postgres://u:[REDACTED:url-credentials]@h/db"
    )


def test_the_input_is_not_modified():
    data = {"token": "abc", "list": ["sk-proj-" + "a" * 30]}
    copy = json.loads(json.dumps(data))
    redact(data)
    assert data == copy


def test_counts_per_rule_and_truncation():
    redactor = Redactor(max_length=10)
    cleaned, counts = redactor.redact_with_counts({"note": "x" * 25, "k": "AKIAFAKEVDTSNZRP3ZOB"})
    assert cleaned["note"] == "x" * 10 + "... [TRUNCATED 15 chars]"
    assert counts == {"truncated": 2, "aws-access-key-id": 1}


def test_extra_patterns_and_keys():
    redactor = Redactor(extra_patterns=[r"ACME-\d{6}"], extra_keys=["pin"])
    assert redactor.redact({"pin": "1234", "note": "id ACME-123456"}) == {
        "pin": "[REDACTED:secret-key]",
        "note": "id [REDACTED:custom-1]",
    }


@pytest.mark.parametrize(
    "unit",
    [
        "a:",
        "sk-",
        "x://",
        "eyJa.",
        "Bearer ",
        "api_key=",
        "token_count:",
        "Basic ",
        "a_key:",
        "-----BEGIN PRIVATE KEY-----",
        "ghp_",
        "password: ",
    ],
)
def test_adversarial_megabyte_does_not_backtrack(unit):
    text = (unit * (1_000_000 // len(unit) + 1))[:1_000_000]
    started = time.perf_counter()
    redact(text)
    # Linear patterns take well under a second here; catastrophic backtracking would take
    # minutes, so this generous bound catches it without flaking on a busy machine.
    assert time.perf_counter() - started < 10
