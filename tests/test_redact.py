"""The redactor against the secret and look-alike corpora (tests/fixtures/corpora)."""

from __future__ import annotations

import json
import time

import pytest

from history_app.agent_history import Redactor, is_secret_key, redact

from .conftest import load_jsonl

SECRETS = load_jsonl("secrets.jsonl")
INNOCUOUS = load_jsonl("innocuous.jsonl")


def leftovers(entry: dict) -> list[str]:
    """What must not survive: the secret, and each piece of it (a body line of a key block,
    a password) that a partial redaction would leave behind."""
    return [entry["secret"], *entry.get("fragments", [])]


def placements(entry: dict) -> list[dict]:
    """The corpus placements, plus the secret used as an object key."""
    return [*entry["placements"], {"where": "as-key", "params": {"headers": {entry["secret"]: "seen"}}}]


@pytest.mark.parametrize("entry", SECRETS, ids=lambda e: e["kind"])
def test_every_secret_is_removed_in_every_placement(entry):
    for placement in placements(entry):
        cleaned, counts = Redactor().redact_with_counts(placement)
        text = json.dumps(cleaned, ensure_ascii=False)
        for leftover in leftovers(entry):
            assert leftover not in text, placement["where"]
            assert leftover not in str(cleaned), placement["where"]
        assert sum(counts.values()) >= 1


@pytest.mark.parametrize("entry", SECRETS, ids=lambda e: e["kind"])
def test_redacting_again_changes_and_counts_nothing(entry):
    """``redact_history`` re-applies the rules to stored runs: clean data must stay as it is."""
    for placement in placements(entry):
        once = Redactor().redact(placement)
        assert Redactor().redact_with_counts(once) == (once, {}), placement["where"]


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


def test_secret_keys_stay_distinct_and_are_reported_by_path():
    slack_a = "xoxp-1234567890-0987654321-FAKEaaaaaaaaaaaaaaaaaaaa"
    slack_b = "xoxp-1234567890-0987654321-FAKEbbbbbbbbbbbbbbbbbbbb"
    data = {"metadata": {slack_a: 1, slack_b: {"AKIAFAKEVDTSNZRP3ZOB": "x"}, "[REDACTED:slack]": 3}}
    cleaned, counts, fields = Redactor().redact_with_report(data)
    assert cleaned == {
        "metadata": {
            "[REDACTED:slack]": 1,
            "[REDACTED:slack]#2": {"[REDACTED:aws-access-key-id]": "x"},
            "[REDACTED:slack]#3": 3,
        }
    }
    assert counts == {"slack": 2, "aws-access-key-id": 1}
    assert fields == [
        {"path": "$.metadata.[REDACTED:slack]", "rules": {"slack": 1}, "part": "key"},
        {"path": "$.metadata.[REDACTED:slack]#2", "rules": {"slack": 1}, "part": "key"},
        {
            "path": "$.metadata.[REDACTED:slack]#2.[REDACTED:aws-access-key-id]",
            "rules": {"aws-access-key-id": 1},
            "part": "key",
        },
    ]
    assert Redactor().redact(data) == cleaned


def test_a_key_that_names_a_secret_still_hides_its_value():
    assert redact({"api_key=FAKEkv123": "x", "GITHUB_TOKEN": "ghp-like"}) == {
        "api_key=[REDACTED:key-value]": "[REDACTED:secret-key]",
        "GITHUB_TOKEN": "[REDACTED:secret-key]",
    }


def test_redaction_counts_keep_only_rule_names():
    redactor = Redactor()
    counts = {"AKIAFAKEVDTSNZRP3ZOB": 1, "openai": 2, "custom-3": 1, "truncated": 1, "pem-private-key": True}
    assert redactor.known_counts(counts) == {"openai": 2, "custom-3": 1, "truncated": 1}


@pytest.mark.parametrize(
    ("stored", "widened"),
    [
        (
            "[REDACTED:pem-private-key]-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,FAKE01\n\nFAKEbody+/\n"
            "-----END RSA PRIVATE KEY-----\nafter",
            "[REDACTED:pem-private-key]\nafter",
        ),
        (
            "postgres://u:[REDACTED:url-credentials]@ss@host/db",
            "postgres://u:[REDACTED:url-credentials]@host/db",
        ),
    ],
)
def test_what_an_older_rule_cut_short_is_widened_without_counting_it_again(stored, widened):
    assert Redactor().redact_with_counts(stored) == (widened, {})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgres://u:p@ss@h:5432/db", "postgres://u:[REDACTED:url-credentials]@h:5432/db"),
        ("x://u:p/ss@h/db", "x://u:[REDACTED:url-credentials]@h/db"),
        ("x://u:p@ss/w@h/db", "x://u:[REDACTED:url-credentials]@h/db"),
        ("redis://:FAKEpw@h:6379", "redis://:[REDACTED:url-credentials]@h:6379"),
        ("https://example.com:8080/path@v2", "https://example.com:8080/path@v2"),
        ("see https://example.com/a@b", "see https://example.com/a@b"),
        (
            "authorization: basic ZGVwbG95OkZBS0U=",
            "authorization: [REDACTED:key-value] [REDACTED:basic-auth]",
        ),
        ("Authorization: Token FAKE0123", "Authorization: [REDACTED:key-value] [REDACTED:auth-header]"),
        (
            'Authorization: Digest username="u", response="FAKE66"\nnext',
            "Authorization: [REDACTED:key-value] [REDACTED:auth-header]\nnext",
        ),
        ("Cookie: a=1; sid=FAKE\r\nHost: x", "Cookie: [REDACTED:auth-header]\r\nHost: x"),
        ("basic authentication is off", "basic authentication is off"),
    ],
)
def test_urls_and_headers(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize(
    "unit",
    [
        "://u:",
        "://a:b@c",
        "Authorization: ",
        "cookie: a=",
        "-----BEGIN PRIVATE KEY-----\n",
        "-----BEGIN PRIVATE KEY-----\nProc-Type: ",
        "[REDACTED:pem-private-key]",
        "PuTTY-User-Key-File-2:",
        "basic QUJDREVGR0g6",
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
