"""The redactor against the secret and look-alike corpora (tests/fixtures/corpora)."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import json
import re
import re._constants as sre_constants
import re._parser as sre_parser
import string
import textwrap
import time
from pathlib import Path

import pytest

from history_app.agent_history import Redactor, is_secret_key, redact
from history_app.benchmarks.library import transcript

from .conftest import HYPOTHESIS_PROFILE, load_jsonl

redact_module = importlib.import_module("history_app.agent_history.redact")

SECRETS = load_jsonl("secrets.jsonl")
INNOCUOUS = load_jsonl("innocuous.jsonl")

# One redactor for the corpus tests below, shared: an instance is stateless between calls
# (its docstring), and making one derives its gate tables from a hundred rules, about 2 ms:
# the 9,500 these tests made cost 16 s of CPU, a third of the file.
CORPUS_REDACTOR = Redactor()


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
        cleaned, counts = CORPUS_REDACTOR.redact_with_counts(placement)
        text = json.dumps(cleaned, ensure_ascii=False)
        for leftover in leftovers(entry):
            assert leftover not in text, placement["where"]
            assert leftover not in str(cleaned), placement["where"]
        assert sum(counts.values()) >= 1


@pytest.mark.parametrize("entry", SECRETS, ids=lambda e: e["kind"])
def test_redacting_again_changes_and_counts_nothing(entry):
    """``redact_history`` re-applies the rules to stored runs: clean data must stay as it is."""
    for placement in placements(entry):
        once = CORPUS_REDACTOR.redact(placement)
        assert CORPUS_REDACTOR.redact_with_counts(once) == (once, {}), placement["where"]


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
            "authorization: basic [REDACTED:basic-auth]",
        ),
        ("Authorization: Token FAKE0123", "Authorization: Token [REDACTED:auth-header]"),
        (
            'Authorization: Digest username="u", response="FAKE66"\nnext',
            "Authorization: Digest [REDACTED:auth-header]\nnext",
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
        'password: "',
        "password => '",
        "--password ",
        "curl -u a:",
        "<password>",
        '{"name": "DB_PASSWORD", ',
    ],
)
def test_adversarial_megabyte_does_not_backtrack(unit):
    text = (unit * (1_000_000 // len(unit) + 1))[:1_000_000]
    started = time.process_time()
    redact(text)
    # Linear patterns take about 2 s of CPU here; catastrophic backtracking would take
    # minutes. The process's CPU time, not the wall clock: on a machine busy with other
    # work the same redaction took 9 to 23 s of wall time for 1.6 to 2.3 s of CPU.
    assert time.process_time() - started < 10


# -- the shapes of the second outside audit ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # provider tokens
        ("token glpat-FAKEx7Qm2Lp9Rt4Vw8Zk here", "token [REDACTED:gitlab] here"),
        ("npm_FAKEabcdefghijklmnopqrstuvwxyz012345", "[REDACTED:npm]"),
        ("SG.FAKEaBcDeFgHiJkLmN0p1Q.FAKEzYxWvUtSrQpOnMlKjIhGfEdCbA0123456789-_x", "[REDACTED:sendgrid]"),
        (
            "POST https://hooks.slack.com/services/T0FAKE001/B0FAKE002/FAKEx9y8z7w6v5u4t3s2r1q0",
            "POST https://hooks.slack.com/services/[REDACTED:webhook-url]",
        ),
        ("whsec_FAKEa1b2c3d4e5f6g7h8i9j0k1l2m3n4", "[REDACTED:stripe]"),
        ("GOCSPX-FAKEa1B2c3D4e5F6g7H8i9J0k1L2", "[REDACTED:google-oauth]"),
        (
            "AGE-SECRET-KEY-1FAKEQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQY",
            "[REDACTED:age-secret-key]",
        ),
        ("bot123456789:AAFAKEa1b2c3d4e5f6g7h8i9j0k1l2m3n/getMe", "bot[REDACTED:telegram-bot-token]/getMe"),
        (
            "https://a.blob.core.windows.net/c/b?sv=2022-11-02&sp=r&sig=FAKEa1b2c3d4e5f6g7h8%2Bi9%3D&x=1",
            "https://a.blob.core.windows.net/c/b?sv=2022-11-02&sp=r&sig=[REDACTED:azure-sas]&x=1",
        ),
        ("sig=FAKEa1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6q7r8s9t=", "sig=[REDACTED:azure-sas]"),
        (
            "https://acme.webhook.office.com/webhookb2/FAKE1234-aaaa@bbbb-cccc/IncomingWebhook/FAKEabcdef01/dd-ee",
            "https://acme.webhook.office.com/webhookb2/[REDACTED:webhook-url]",
        ),
        ("glc_FAKEeyJvIjoiMTIzNDU2IiwibiI6ImFiYyIsImsiOiJ4eXoifQ==", "[REDACTED:grafana]"),
        (
            "AGE-SECRET-KEY-PQ-1FAKEQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQY",
            "[REDACTED:age-secret-key]",
        ),
        ("AGE-PLUGIN-YUBIKEY-1FAKEQYQSZQGPQYQSZQGPQ", "[REDACTED:age-secret-key]"),
        (
            "/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=fa4e0123456789abcdef0123456789abcdef0123",
            "/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=[REDACTED:presigned-url]",
        ),
        ("sk-or-v1-FAKE0123456789abcdef0123456789abcdef", "[REDACTED:openai]"),
        # command-line flags
        ("--password FAKEpw1", "--password [REDACTED:secret-argument]"),
        ("--password=FAKEpw2", "--password=[REDACTED:key-value]"),
        ("--token abc", "--token [REDACTED:secret-argument]"),
        ("--api-key FAKEk3", "--api-key [REDACTED:secret-argument]"),
        ("--client-secret 'FAKE two'", "--client-secret '[REDACTED:secret-argument]'"),
        ("curl -u user:FAKEpass https://x", "curl -u user:[REDACTED:secret-argument] https://x"),
        ("curl --user user:FAKEpass https://x", "curl --user user:[REDACTED:secret-argument] https://x"),
        ("mysql -uroot -pFAKESecret db", "mysql -uroot -p[REDACTED:secret-argument] db"),
        (
            "docker login -u ci -p FAKEdock registry.io",
            "docker login -u ci -p [REDACTED:secret-argument] registry.io",
        ),
        ("redis-cli -a FAKEredis ping", "redis-cli -a [REDACTED:secret-argument] ping"),
        ("keytool -storepass FAKEstore", "keytool -storepass [REDACTED:secret-argument]"),
        ("npm config set _authToken FAKEnpmcfg", "npm config set _authToken [REDACTED:secret-argument]"),
        (
            "CREATE USER 'a'@'%' IDENTIFIED BY 'FAKEmy';",
            "CREATE USER 'a'@'%' IDENTIFIED BY '[REDACTED:secret-argument]';",
        ),
        ("ALTER ROLE app PASSWORD 'FAKEpg'", "ALTER ROLE app PASSWORD '[REDACTED:secret-argument]'"),
        # assignment variants
        ('password => "FAKEx"', 'password => "[REDACTED:key-value]"'),
        ("'password' => 'FAKEphp'", "'password' => '[REDACTED:key-value]'"),
        ('password := "FAKEgo"', 'password := "[REDACTED:key-value]"'),
        ('if password == "FAKEcmp"', 'if password == "[REDACTED:key-value]"'),
        ("password：FAKEfw", "password：[REDACTED:key-value]"),
        ("password\\uff1aFAKEfw", "password\\uff1a[REDACTED:key-value]"),
        ('password: "correct horse battery staple"', 'password: "[REDACTED:key-value]"'),
        ("secret='two words'", "secret='[REDACTED:key-value]'"),
        ('os.environ["API_KEY"] = "FAKEenv"', 'os.environ["API_KEY"] = "[REDACTED:key-value]"'),
        ("<password>FAKEx</password>", "<password>[REDACTED:xml-value]</password>"),
        ("<apiKey>FAKEk</apiKey>", "<apiKey>[REDACTED:xml-value]</apiKey>"),
        ("<password><![CDATA[FAKE cdata]]></password>", "<password>[REDACTED:xml-value]</password>"),
        ('{"xml": "<password>FAKEx<\\/password>"}', '{"xml": "<password>[REDACTED:xml-value]<\\/password>"}'),
        (
            '<string name="api_key">FAKEandroid</string>',
            '<string name="api_key">[REDACTED:xml-value]</string>',
        ),
        (
            "<key>password</key><string>FAKEplist</string>",
            "<key>password</key><string>[REDACTED:xml-value]</string>",
        ),
        ('<add key="ApiToken" value="FAKEdotnet"/>', '<add key="ApiToken" value="[REDACTED:name-value]"/>'),
        ("&lt;password&gt;FAKEesc&lt;/password&gt;", "&lt;password&gt;[REDACTED:xml-value]&lt;/password&gt;"),
        ('{\\"password\\": \\"FAKEx y\\"}', '{\\"password\\": \\"[REDACTED:key-value]\\"}'),
        (
            '{\\\\\\"password\\\\\\": \\\\\\"FAKEdd\\\\\\"}',
            '{\\\\\\"password\\\\\\": \\\\\\"[REDACTED:key-value]\\\\\\"}',
        ),
        # URL credentials
        ("postgres://u:FAKEp@[::1]:5432/db", "postgres://u:[REDACTED:url-credentials]@[::1]:5432/db"),
        (
            "smtp://me@example.com:FAKEpw@host:587",
            "smtp://me@example.com:[REDACTED:url-credentials]@host:587",
        ),
        ("postgres://u:p%40FAKE@h/db", "postgres://u:[REDACTED:url-credentials]@h/db"),
        (
            "/login?next=postgres%3A%2F%2Fapp%3AFAKEpw%40db.example.com%2Fapp",
            "/login?next=postgres%3A%2F%2Fapp%3A[REDACTED:url-credentials]%40db.example.com%2Fapp",
        ),
        # structured name/value pairs written as text
        (
            '{"name": "DB_PASSWORD", "value": "FAKEhunter2"}',
            '{"name": "DB_PASSWORD", "value": "[REDACTED:name-value]"}',
        ),
        (
            '{"value": "FAKErev", "name": "DB_PASSWORD"}',
            '{"value": "[REDACTED:name-value]", "name": "DB_PASSWORD"}',
        ),
        (
            '{\\"key\\": \\"API_TOKEN\\", \\"value\\": \\"FAKE tok\\"}',
            '{\\"key\\": \\"API_TOKEN\\", \\"value\\": \\"[REDACTED:name-value]\\"}',
        ),
        ("- name: DB_PASSWORD\n  value: FAKEyaml", "- name: DB_PASSWORD\n  value: [REDACTED:name-value]"),
        (
            "{'name': 'GITHUB_TOKEN', 'value': 'FAKErepr'}",
            "{'name': 'GITHUB_TOKEN', 'value': '[REDACTED:name-value]'}",
        ),
    ],
)
def test_audit_shapes(text, expected):
    assert redact(text) == expected
    assert Redactor().redact_with_counts(expected) == (expected, {})


def test_env_lists_and_har_headers_hide_the_value_of_a_secret_name():
    data = {
        "env": [
            {"name": "DB_HOST", "value": "db.internal"},
            {"name": "DB_PASSWORD", "value": "FAKEhunter2"},
            {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
            {"key": "API_TOKEN", "value": {"nested": "FAKEtok"}, "type": "secret"},
            {"ParameterKey": "DbPassword", "ParameterValue": "FAKEcfn"},
            {"name": "token_count", "value": 512},
            {"name": "Reset your password", "value": "a sentence is not a name"},
        ],
        "headers": [{"name": "Cookie", "value": "sid=FAKE"}, {"name": "Accept", "value": "*/*"}],
    }
    cleaned, counts, fields = Redactor().redact_with_report(data)
    assert cleaned == {
        "env": [
            {"name": "DB_HOST", "value": "db.internal"},
            {"name": "DB_PASSWORD", "value": "[REDACTED:name-value]"},
            {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
            {"key": "API_TOKEN", "value": "[REDACTED:name-value]", "type": "secret"},
            {"ParameterKey": "DbPassword", "ParameterValue": "[REDACTED:name-value]"},
            {"name": "token_count", "value": 512},
            {"name": "Reset your password", "value": "a sentence is not a name"},
        ],
        "headers": [{"name": "Cookie", "value": "[REDACTED:name-value]"}, {"name": "Accept", "value": "*/*"}],
    }
    assert counts == {"name-value": 4}
    assert {"path": "$.env[1].value", "rules": {"name-value": 1}} in fields
    assert Redactor().redact_with_counts(data) == (cleaned, counts)
    assert Redactor().redact_with_counts(cleaned) == (cleaned, {})
    assert "name-value" in Redactor().rule_names


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A word that describes the secret after its name is kept (a known trade-off: a
        # password that is one of these words stays; any other word goes).
        ("password: required", "password: required"),
        ("Token: expired, secret: hidden, auth: optional", "Token: expired, secret: hidden, auth: optional"),
        ("password: letmein", "password: [REDACTED:key-value]"),
        ("password: secret", "password: [REDACTED:key-value]"),
        # A flag followed by a word of prose is not given a value.
        ("Use --password to pass it", "Use --password to pass it"),
        ("the --token flag is optional", "the --token flag is optional"),
        ("pass --token $TOKEN", "pass --token [REDACTED:secret-argument]"),
        # A pair that starts a line (YAML, INI, .env, a connection string's next pair)
        # takes the rest of it; in the middle of a sentence only its first word goes.
        ("password: correct horse battery staple\nuser: bob", "password: [REDACTED:key-value]\nuser: bob"),
        ("  PASSWORD=correct horse battery  # prod", "  PASSWORD=[REDACTED:key-value]"),
        (
            "Server=db;Password=my FAKE pass;Database=app",
            "Server=db;Password=[REDACTED:key-value];Database=app",
        ),
        ("the db password: FAKE1 and more words", "the db password: [REDACTED:key-value] and more words"),
        ("password = my pass phrase\nport = 5432", "password = [REDACTED:key-value]\nport = 5432"),
        ("password: a b c  user: bob", "password: [REDACTED:key-value]  user: bob"),
        # ...but a log line's or a sentence's name=value is one word, as anywhere else.
        ("password=FAKE1 user=bob status=200", "password=[REDACTED:key-value] user=bob status=200"),
        ("token=FAKE1 and then a retry", "token=[REDACTED:key-value] and then a retry"),
        # Code around a label, arrow functions and comparisons with variables are not values.
        ('print("Password: " + pw + " end")', 'print("Password: " + pw + " end")'),
        ("tokens.map(token => token.trim())", "tokens.map(token => token.trim())"),
        ("if (password == confirmation) submit()", "if (password == confirmation) submit()"),
        (
            "I can't remember the password 'cause it changed",
            "I can't remember the password 'cause it changed",
        ),
        # Tools whose flags look alike but hold no password.
        ("ssh -p 2222 host && mkdir -p /srv && docker run -u 1000:1000 app", None),
        ("mysql -u root -p app; curl -u deploy https://x", None),
    ],
)
def test_trade_offs(text, expected):
    assert redact(text) == (text if expected is None else expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A token stops at what closes the string or the header around it.
        (
            '{"headers": {"Authorization": "Bearer zK9pLm2vQabcdefgh"}}',
            '{"headers": {"Authorization": "Bearer [REDACTED:bearer]"}}',
        ),
        (
            "curl -H 'Authorization: Bearer zK9pLm2vQabcdefgh' https://x",
            "curl -H 'Authorization: Bearer [REDACTED:bearer]' https://x",
        ),
        (
            "headers = {'Authorization': f'Bearer zK9pLm2vQabcdefgh'}",
            "headers = {'Authorization': f'Bearer [REDACTED:bearer]'}",
        ),
        (
            "curl -H 'Cookie: sessionid=zK9pLm2vQ; csrftoken=abc' https://x",
            "curl -H 'Cookie: [REDACTED:auth-header]' https://x",
        ),
        (
            'curl -H "Cookie: session=FAKEck1; theme=dark" https://x',
            'curl -H "Cookie: [REDACTED:auth-header]" https://x',
        ),
        (
            '{"h": "Authorization: Digest username=\\"u\\", response=\\"FAKE66\\""}',
            '{"h": "Authorization: Digest [REDACTED:auth-header]"}',
        ),
        # A command after a variable set for it keeps its words.
        ("PGPASSWORD=zK9pLm2vQ psql -h db", "PGPASSWORD=[REDACTED:key-value] psql -h db"),
        ("/cb?token=zK9pLm2vQ&page=2", "/cb?token=[REDACTED:key-value]&page=2"),
        ("a=1&amp;password=zK9pLm2vQ&amp;b=2", "a=1&amp;password=[REDACTED:key-value]&amp;b=2"),
        ("set -x; API_TOKEN=zK9pLm2vQ ./deploy.sh", "set -x; API_TOKEN=[REDACTED:key-value] ./deploy.sh"),
        (
            "AWS_SECRET_ACCESS_KEY=FAKEaws1sk aws s3 ls",
            "AWS_SECRET_ACCESS_KEY=[REDACTED:key-value] aws s3 ls",
        ),
        ("API_KEY=FAKEenv9val ./run.sh --prod", "API_KEY=[REDACTED:key-value] ./run.sh --prod"),
        # The quotes, the scheme and the flags around a value stay.
        ('machine host login u password "Zk9 pLm2vQ"', 'machine host login u password "[REDACTED:netrc]"'),
        ("curl -sSfu alice:zK9pLm2vQ https://x", "curl -sSfu alice:[REDACTED:secret-argument] https://x"),
        ('password = """zK9pLm2vQ"""', 'password = """[REDACTED:key-value]"""'),
        ("password: &pw zK9pLm2vQ\n", "password: &pw [REDACTED:key-value]\n"),
        ("API_KEY: Final = 'zK9pLm2vQ'", "API_KEY: Final = '[REDACTED:key-value]'"),
        ('const SECRET: &str = "zK9pLm2vQ";', 'const SECRET: &str = "[REDACTED:key-value]";'),
        (
            "locals {\n  api_token = <<EOT\nzK9pLm2vQ\nEOT\n}",
            "locals {\n  api_token = <<EOT\n[REDACTED:key-value]\nEOT\n}",
        ),
        ("auth: Token x1y2z3w4", "auth: Token [REDACTED:key-value]"),
        (
            "data:\n  tls.key: |\n    LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlF\n    QkFBS0NBUUVBeDdMbTJSdDlW\n  tls.crt: x\n",
            "data:\n  tls.key: |\n    [REDACTED:base64-private-key]\n  tls.crt: x\n",
        ),
        # A token written with an encoded '-' is stored read as it would be used.
        ("key sk&#45;proj&#45;Xq7Lm2Rt9Vb4Nc8Wd3Hf6Jk1Pz5Ys0Ta here", "key [REDACTED:openai] here"),
    ],
)
def test_what_surrounds_a_secret_stays(text, expected):
    assert redact(text) == expected
    assert Redactor().redact_with_counts(expected) == (expected, {})


def test_a_command_line_as_a_list_loses_only_its_secret_items():
    data = {"cmd": ["docker", "login", "-u", "ci", "-p", "FAKEdock9", "registry.io"], "tags": ["-v", "x"]}
    cleaned, counts, fields = Redactor().redact_with_report(data)
    assert cleaned == {
        "cmd": ["docker", "login", "-u", "ci", "-p", "[REDACTED:secret-argument]", "registry.io"],
        "tags": ["-v", "x"],
    }
    assert counts == {"secret-argument": 1}
    assert fields == [{"path": "$.cmd[5]", "rules": {"secret-argument": 1}}]
    assert Redactor().redact_with_counts(data) == (cleaned, counts)
    assert Redactor().redact_with_counts(cleaned) == (cleaned, {})


@pytest.mark.parametrize(
    ("unit", "count", "rules"),
    [
        ("password=", 20000, {"key-value"}),
        ("glpat-", 20000, {"gitlab"}),
        ("<password>", 10000, set()),
        ("<password><![CDATA[", 5000, set()),
        ("<key>password</key>", 5000, set()),
        ("&lt;password&gt;", 6000, set()),
        ('password: "', 10000, {"key-value"}),
        ("password => '", 8000, {"key-value"}),
        ('\\"password\\": \\"', 6000, set()),
        ("--password ", 10000, set()),
        ("secret '", 12000, {"secret-argument"}),
        ("curl -u a:", 10000, {"secret-argument"}),
        ("mysql -p", 12000, {"secret-argument"}),
        ("identified by ", 7000, set()),
        ('{"name": "DB_PASSWORD", ', 5000, set()),
        ("- name: API_TOKEN\\n", 5000, set()),
        ("sig=", 25000, {"azure-sas"}),
        ("hooks.slack.com/services/", 4000, set()),
        ("://u:p@[", 12000, set()),
        # The outside attack: 60 KB of "eyJ" cost 8-9 s (each "eyJ" ran to the end of the
        # run), 900 KB of an encoded "://" 3.5 s.
        ("eyJ", 20000, set()),
        ("%3A%2F%2F", 100000, set()),
        ('"kty": "RSA", "d": "', 4000, set()),
        (".example.com\tTRUE\t/\tTRUE\t0\t", 4000, {"cookie-file"}),
        ("machine h login u password ", 4000, {"netrc"}),
        ("| user | password |\n|---|---|\n| bob | ", 3000, set()),
        ("LS0tLS1CRUdJTi", 8000, set()),
        ("sk-\u200b", 20000, {"openai"}),
        ("ghp\\_", 20000, set()),
    ],
)
def test_hostile_repetitions_end_in_one_linear_pass(unit, count, rules):
    """100 KB of a repeated prefix: every pattern is bounded and every search resumes where
    the last one stopped, so these take milliseconds (a quadratic scan took minutes), and
    twice the text costs about twice the time."""
    text = unit * count
    cleaned, counts = Redactor().redact_with_counts(text)
    assert set(counts) == rules
    if not rules:
        assert cleaned == text
    # The output is no easier: a length-capped match can leave the next repetition after
    # its marker, which a second pass takes (as "sk-" * 20000 always did).
    assert set(Redactor().redact_with_counts(cleaned)[1]) <= rules
    assert_linear(unit)


# -- linear by construction: hostile inputs derived from every rule's own pattern ----------

# A character for each class the patterns use (digits, spaces, word characters…).
_CATEGORY_CHARS = {
    sre_constants.CATEGORY_DIGIT: "0",
    sre_constants.CATEGORY_NOT_DIGIT: "a",
    sre_constants.CATEGORY_SPACE: " ",
    sre_constants.CATEGORY_NOT_SPACE: "a",
    sre_constants.CATEGORY_WORD: "a",
    sre_constants.CATEGORY_NOT_WORD: "-",
    sre_constants.CATEGORY_LINEBREAK: "\n",
    sre_constants.CATEGORY_NOT_LINEBREAK: "a",
}
_PRINTABLE = string.ascii_letters + string.digits + string.punctuation + " \t\n"
_WAYS = 4  # ways through a pattern kept at each step (their number would multiply)


def _class_chars(items: list) -> list[str]:
    """Up to three characters a character class matches (both ends of each range)."""
    chars: list[str] = []
    members: set[str] = set()
    negate = False
    for op, arg in items:
        if op is sre_constants.NEGATE:
            negate = True
        elif op is sre_constants.LITERAL:
            chars.append(chr(arg))
            members.add(chr(arg))
        elif op is sre_constants.RANGE:
            chars += [chr(arg[0]), chr(arg[1])]
            members.update(chr(c) for c in range(arg[0], min(arg[1], 0x7F) + 1))
        elif op is sre_constants.CATEGORY:
            chars.append(_CATEGORY_CHARS.get(arg, "a"))
    if negate:
        return [c for c in _PRINTABLE if c not in members][:2] or ["a"]
    return list(dict.fromkeys(chars))[:3]


def _ways(sequence: list) -> list[str]:
    """A few strings that each follow ``sequence`` (a parsed pattern) element by element:
    its literals as written, a character of each class, each repetition at its least
    (at least once), each alternative of a branch. Assertions add nothing."""
    out = [""]
    for op, arg in sequence:
        if op is sre_constants.LITERAL:
            options = [chr(arg)]
        elif op is sre_constants.NOT_LITERAL:
            options = ["b" if arg == ord("a") else "a"]
        elif op is sre_constants.ANY:
            options = ["a"]
        elif op is sre_constants.IN:
            options = _class_chars(arg)
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
            low, _, inner = arg
            options = [way * max(low, 1) for way in _ways(inner)] + ([""] if low == 0 else [])
        elif op is sre_constants.SUBPATTERN:
            options = _ways(arg[-1])
        elif op is sre_constants.ATOMIC_GROUP:
            options = _ways(arg)
        elif op is sre_constants.BRANCH:
            options = [way for alternative in arg[1] for way in _ways(alternative)]
        elif op is sre_constants.CATEGORY:
            options = [_CATEGORY_CHARS.get(arg, "a")]
        else:  # AT, ASSERT, ASSERT_NOT, GROUPREF: they match no character
            continue
        options = list(dict.fromkeys(options))[:_WAYS]
        out = list(dict.fromkeys(a + b for a in out for b in options))[:_WAYS]
    return out


def hostile_units(pattern: re.Pattern[str]) -> set[str]:
    """The repeating units an attack on ``pattern`` is made of: each way through every
    prefix of the pattern (its literals and a character of each class in order, cut
    after any element), so that a run the pattern scans, then fails on, repeats."""
    sequence = list(sre_parser.parse(pattern.pattern, pattern.flags))
    return {way for cut in range(1, len(sequence) + 1) for way in _ways(sequence[:cut]) if way}


def every_pattern() -> dict[str, re.Pattern[str]]:
    """Every compiled pattern of the redactor, found rather than listed: the default
    rules' own and every one the module holds (in tuples, in rule objects), so a rule
    added tomorrow is tried too."""
    found: dict[str, re.Pattern[str]] = {}

    def collect(value: object, name: str, depth: int) -> None:
        if isinstance(value, re.Pattern):
            found.setdefault(name, value)
        elif isinstance(value, tuple | list) and depth < 4:
            for i, item in enumerate(value):
                collect(item, f"{name}[{i}]", depth + 1)
        elif (
            type(value).__module__ == redact_module.__name__
            and hasattr(value, "__dict__")
            and not isinstance(value, type)
        ):
            for attribute, item in vars(value).items():
                collect(item, f"{name}.{attribute}", depth + 1)

    for i, rule in enumerate(Redactor().rule_set):
        collect(rule, f"{getattr(rule, 'name', type(rule).__name__)}#{i}", 0)
    for name, value in vars(redact_module).items():
        collect(value, name, 0)
    unique: dict[tuple[str, int], str] = {}
    for name, pattern in found.items():
        unique.setdefault((pattern.pattern, pattern.flags), name)
    return {name: found[name] for name in unique.values()}


PATTERNS = every_pattern()


_REDACTOR = Redactor()


def _cost(text: str, repeat: int, redactor: Redactor = _REDACTOR) -> float:
    """The least CPU time of ``repeat`` redactions of ``text`` (the least: on a shared
    machine the slower samples measure the neighbours)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        redactor.redact_with_counts(text)
        best = min(best, time.process_time() - started)
    return best


def _text(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def assert_linear(unit: str, size: int = 16_000) -> float:
    """Twice the repetitions of ``unit`` cost at most about twice the time (a quadratic
    scan costs four times): measured as ratios in this process, never as milliseconds.
    Texts too quick to time well are made larger first. Returns the CPU time of one
    character of the larger text."""
    small = _cost(_text(unit, size), 1)
    while size < 128_000 and small < 0.0005:
        size *= 4
        small = _cost(_text(unit, size), 1)
    large = _cost(_text(unit, 2 * size), 1)
    # Measured again before judging, the least of a few, twice if need be: on a machine
    # shared with other test processes a busy second can hide in five samples.
    for _ in range(2):
        if large / max(small, 1e-6) < 2.5:
            break
        small = min(small, _cost(_text(unit, size), 5))
        large = min(large, _cost(_text(unit, 2 * size), 5))
    assert large / max(small, 1e-6) < 3, (unit, size, large / max(small, 1e-6))
    return large / (2 * size)


@functools.cache
def _ordinary_cost() -> float:
    """The CPU time of one character of ordinary text: the library benchmark's transcript
    (prose, URLs, JSON tool results, a few secrets)."""
    data = transcript(200_000)
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        _REDACTOR.redact_with_counts(data)
        best = min(best, time.process_time() - started)
    return best / len(json.dumps(data))


# The derived inputs are many (about 1,600), so each is timed cheaply: one redaction at a
# small size and one at four times it, where a linear rule costs 4 times as much and a
# quadratic one up to 16. Only a ratio that looks high is measured again (the least of a
# few more), and judged quadratic past ``_QUADRATIC``. The thorough profile (.ci/run)
# times larger texts, the least of three, so a quadratic term too small to show at 2,000
# characters shows there.
_SCREEN_SIZE, _SCREEN_REPEAT = (8_000, 3) if HYPOTHESIS_PROFILE == "thorough" else (2_000, 1)
_SUSPECT, _QUADRATIC = 6.0, 8.0
# Times ordinary text's cost of a character. It was 25 when ordinary text cost about 1.36
# times what it costs now (8.8 MB/s against 12 in the library benchmark): the same bound
# in CPU time. Runs of zero-width characters cost 23-26 times ordinary text now (each
# position scans up to 64 of them in ``_INVISIBLE_IN_WORD``), as they did before.
_SLOW_PER_CHAR = 34


def linearity_fault(
    unit: str, redactor: Redactor = _REDACTOR, size: int = _SCREEN_SIZE, repeat: int = _SCREEN_REPEAT
) -> str | None:
    """Why ``unit`` repeated is not redacted in linear time, or costs more than
    ``_SLOW_PER_CHAR`` times ordinary text per character; ``None`` when it is fine."""
    small = _cost(_text(unit, size), repeat, redactor)
    large = _cost(_text(unit, 4 * size), repeat, redactor)
    # A high ratio is measured again, the least of a few more, and once more before it
    # fails: on a busy machine the slower samples measure the neighbours.
    for again in (3, 5):
        if large / max(small, 1e-6) < (_SUSPECT if again == 3 else _QUADRATIC):
            break
        small = min(small, _cost(_text(unit, size), again, redactor))
        large = min(large, _cost(_text(unit, 4 * size), again, redactor))
    else:
        if large / max(small, 1e-6) >= _QUADRATIC:
            return f"{unit!r}: 4 times {size} characters cost {large / max(small, 1e-6):.1f} times as much"
    per_char = large / (4 * size)
    if per_char > _SLOW_PER_CHAR * _ordinary_cost():
        per_char = _cost(_text(unit, 64_000), 5, redactor) / 64_000
        if per_char > _SLOW_PER_CHAR * _ordinary_cost():
            return f"{unit!r}: a character costs {per_char / _ordinary_cost():.0f} times ordinary text's"
    return None


# Patterns share prefixes ("eyJ", a class of token characters): each input is judged once.
_default_fault = functools.cache(linearity_fault)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_pattern_is_linear_on_repetitions_of_its_own_parts(name):
    """Repetitions of each prefix of each pattern (its literals, its classes): the shapes
    that made "eyJ" * 20000 quadratic. Each costs about 4 times as much at 4 times the
    size, and per character no more than a generous multiple of ordinary text (a bounded
    run tried at every position is linear but slow)."""
    faults = [fault for unit in sorted(hostile_units(PATTERNS[name])) if (fault := _default_fault(unit))]
    assert faults == []


def test_the_linearity_screen_catches_a_quadratic_rule():
    """The derivation and the screen above flag the rule the outside attack found
    quadratic ("eyJ" * 20000 cost seconds), added as a custom pattern: a rule with an
    unbounded run that every start position scans again."""
    quadratic = re.compile(r"(?i)eyj[a-z0-9_\-]+\.[a-z0-9_\-]+\.[a-z0-9_\-]+")
    redactor = Redactor(extra_patterns=[quadratic])
    units = sorted(hostile_units(quadratic))
    # Small texts in both profiles: the rule costs seconds at larger ones.
    faults = [fault for unit in units if (fault := linearity_fault(unit, redactor, 1_000, 1))]
    # The inputs that run on (no '.' to stop at) are the quadratic ones.
    flagged = {fault.split(":")[0].strip("'") for fault in faults}
    assert flagged & {"eyj", "eyja", "eyjz", "eyj0"}, faults
    # The same inputs are linear without it: the screen flags the rule, not the inputs.
    assert [fault for unit in units if (fault := linearity_fault(unit, _REDACTOR, 1_000, 1))] == []


def test_patterns_are_found_in_every_rule():
    """The derivation above sees every default rule (and would see a new one)."""
    names = {name.split("#")[0] for name in PATTERNS}
    rules = {getattr(rule, "name", "") for rule in Redactor().rule_set if hasattr(rule, "pattern")}
    assert rules <= names
    assert hostile_units(re.compile(r"(?i)eyj[a-z0-9_\-]+\.[a-z0-9_\-]+")) >= {"eyj", "eyja", "eyja."}


def test_every_marker_names_a_known_rule():
    redactor = Redactor()
    seen = set()
    for entry in SECRETS:
        for placement in placements(entry):
            text = json.dumps(redactor.redact(placement))
            seen.update(re.findall(r"\[REDACTED:([a-z0-9\-]+)\]", text))
    assert seen <= redactor.rule_names
    assert {
        "gitlab",
        "npm",
        "sendgrid",
        "webhook-url",
        "age-secret-key",
        "telegram-bot-token",
        "azure-sas",
        "secret-argument",
        "xml-value",
        "name-value",
    } <= seen


def test_the_prefilter_spells_out_the_pair_hints():
    """``_redact_shapes`` writes the hint words, tools and gates out (faster than a loop);
    they must stay the lists the rules use."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(Redactor._redact_shapes)))
    tested: dict[str, set[str]] = {"text": set(), "lowered": set()}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.ops[0], ast.In)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.comparators[0], ast.Name)
            and node.comparators[0].id in tested
        ):
            tested[node.comparators[0].id].add(node.left.value)
    hints = {
        *redact_module._KV_HINT_WORDS,
        *redact_module._TOOL_TRIGGERS,
        *redact_module._POSITIONAL_TRIGGERS,
        "dentified",
    }
    assert tested["lowered"] == hints
    assert tested["text"] == set(redact_module._PAIR_GATES)


def test_the_security_page_lists_every_rule():
    page = (Path(__file__).parent.parent / "history_app" / "docs" / "security.md").read_text()
    section = page[page.index("## Redaction") : page.index("## Stored data and new rules")]
    missing = [name for name in sorted(Redactor().rule_names) if f"`{name}`" not in section]
    assert missing == []


@pytest.mark.parametrize("char", list("&'(),;[]{}\""))
@pytest.mark.parametrize(
    "template",
    [
        "password={}",
        "DB_PASSWORD={} ok",
        "password: {}\nx: 1",
        "--password {} -v",
        "api_key={}",
        "docker run -e POSTGRES_PASSWORD={} postgres:16",
        "curl -u admin:{} https://api.example.com",
        "Authorization: Bearer {}",
        "host=db user=app password={} dbname=app",
    ],
)
def test_punctuation_inside_an_unquoted_value_belongs_to_it(char, template):
    """The outside attack's probe: a password with any of these characters inside loses
    its whole value in every key=value placement, not just the part before the mark."""
    text = template.format(f"FAKEab9x{char}cTailSecret77")
    cleaned = redact(text)
    assert "TailSecret77" not in cleaned and "FAKEab9x" not in cleaned, cleaned


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_values_nested_deeper_than_the_stack_are_redacted(kind):
    """A list 500 deep is valid JSON: redacting it must not raise RecursionError, and it
    is redacted as a shallow one is (values, keys, secret keys, counts, report paths)."""
    depth = 5000
    value: object = ["FAKE ghp_FAKEa1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6", {"password": "FAKEdeep9x", "n": 3}]
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    cleaned, counts = Redactor().redact_with_counts(value)
    reported, report_counts, fields = Redactor().redact_with_report(value)
    for _ in range(depth):  # unwrapped by hand: == on 5000 levels would recurse too
        cleaned = cleaned[0] if kind == "list" else cleaned["a"]
        reported = reported[0] if kind == "list" else reported["a"]
    assert cleaned == reported == ["FAKE [REDACTED:github]", {"password": "[REDACTED:secret-key]", "n": 3}]
    assert counts == report_counts == {"github": 1, "secret-key": 1}
    assert sorted(f["rules"].popitem()[0] for f in fields) == ["github", "secret-key"]


def test_new_secret_keys_and_numeric_passwords():
    """Keys the attack found unjudged: a service account's private_key_id, a one-time
    password's seed, a storage account's key; an integer under a password's own key (a
    count beside one stays)."""
    data = {
        "private_key_id": "FAKEa1b2c3d4",
        "totp_seed": "FAKEJBSWY3DP",
        "AZURE_STORAGE_KEY": "FAKEzm9vYmFy",
        "storage_key": "users/42",
        "db": {"password": 123456789, "password_min_length": 12, "token_count": 3, "pin": True},
    }
    assert redact(data) == {
        "private_key_id": "[REDACTED:secret-key]",
        "totp_seed": "[REDACTED:secret-key]",
        "AZURE_STORAGE_KEY": "[REDACTED:secret-key]",
        "storage_key": "users/42",
        "db": {"password": "[REDACTED:secret-key]", "password_min_length": 12, "token_count": 3, "pin": True},
    }
