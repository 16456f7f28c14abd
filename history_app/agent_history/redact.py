"""Secret redaction shared by the library and the server.

Two kinds of rule:

* **Key rules** replace the whole value stored under a secret-like key, at any depth.
  Keys are split into words (``snake_case``, ``kebab-case``, ``camelCase``,
  ``UPPER_CASE``) and judged by those words, never by substring, so ``session_id``,
  ``max_tokens``, ``author``, ``passage`` and ``secretary`` survive while ``api_key``,
  ``GITHUB_TOKEN`` and ``clientSecret`` do not.
* **Value rules** find known secret shapes inside any string (provider keys, JWTs, PEM
  blocks, ``Bearer``/``Basic`` headers, credentials in URLs, ``name=value`` pairs).

Every value pattern is anchored and has bounded, non-nested quantifiers, so matching is
linear in the input; each rule first checks a cheap literal with ``in`` and skips the
regular expression entirely when the literal is absent (most text never reaches a regex).
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

MARKER = "[REDACTED:{rule}]"
TRUNCATION_MARKER = "... [TRUNCATED {removed} chars]"

# Words that make a key secret wherever they stand in it.
_SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "pass",
        "secret",
        "secrets",
        "token",
        "apikey",
        "credential",
        "credentials",
        "cookie",
        "cookies",
        "auth",
        "authorization",
        "oauth",
        "jwt",
        "bearer",
        "privatekey",
        "accesskey",
        "sessiontoken",
    }
)
# A key ending in one of these describes a secret rather than holding one.
_NEUTRAL_LAST_WORDS = frozenset(
    {
        "count",
        "counts",
        "length",
        "len",
        "limit",
        "usage",
        "budget",
        "policy",
        "required",
        "strength",
        "type",
        "types",
        "enabled",
        "method",
        "mode",
        "scheme",
        "provider",
        "url",
        "uri",
        "endpoint",
        "expiry",
        "expires",
        "ttl",
        "name",
        "names",
        "hint",
        "version",
        "rotation",
        "file",
        "path",
        "present",
        "exists",
        "set",
        "at",
    }
)
# "<prefix>_key" is an ordinary key (a lookup key, not a credential) for these prefixes.
_PLAIN_KEY_PREFIXES = frozenset(
    {
        "primary",
        "foreign",
        "sort",
        "cache",
        "partition",
        "idempotency",
        "dedup",
        "dedupe",
        "group",
        "lookup",
        "hash",
        "public",
        "row",
        "map",
        "object",
        "unique",
        "composite",
        "natural",
        "shard",
        "routing",
        "message",
        "translation",
        "issue",
        "project",
        "entity",
        "record",
        "dict",
        "registry",
        "state",
        "storage",
        "search",
        "music",
        "hot",
        "short",
        "sequence",
    }
)
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def key_words(key: str) -> list[str]:
    return [w.lower() for part in _WORD_SPLIT.split(key) for w in _CAMEL.findall(part)]


def is_secret_key(key: str, extra_words: frozenset[str] = frozenset()) -> bool:
    """True when a mapping key names a secret (judged by whole words, not substrings)."""
    return _is_secret_key(key, extra_words)


@functools.lru_cache(maxsize=4096)
def _is_secret_key(key: str, extra_words: frozenset[str]) -> bool:
    words = key_words(key)
    if not words:
        return False
    last = words[-1]
    if last in _NEUTRAL_LAST_WORDS and len(words) > 1:
        return False
    secret_words = _SECRET_WORDS.union(extra_words) if extra_words else _SECRET_WORDS
    if any(w in secret_words for w in words):
        return True
    # "api key", "private key", "x-api-key", "STRIPE_KEY"; but not "sort_key" or "key".
    return last == "key" and len(words) > 1 and words[-2] not in _PLAIN_KEY_PREFIXES


@dataclass(frozen=True, eq=False)
class ValueRule:
    """A secret shape: ``literal`` is the cheap prefilter, ``pattern`` the exact match.

    ``group`` names the part of the match to replace (0 = all of it); ``check`` can veto
    a match (a ``Basic`` header must decode to ``user:password``).
    """

    name: str
    literal: str | tuple[str, ...]
    pattern: re.Pattern[str]
    group: int = 0
    check: Callable[[re.Match[str]], bool] | None = None

    def present(self, text: str) -> bool:
        if isinstance(self.literal, str):
            return self.literal in text
        return any(lit in text for lit in self.literal)

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        marker = MARKER.format(rule=self.name)
        pieces: list[str] = []
        pos = done = 0
        resume_group = 1 if self.pattern.groups else 0
        while (match := self.pattern.search(text, pos)) is not None:
            if self.check is not None and not self.check(match):
                # Resume inside the match: "Bearer of this letter" must not hide what follows.
                pos = max(match.end(resume_group), match.start() + 1)
                continue
            counts[self.name] += 1
            start, end = match.span(self.group)
            pieces.append(text[done:start])
            pieces.append(marker)
            done = pos = max(end, match.start() + 1)
        if not pieces:
            return text
        pieces.append(text[done:])
        return "".join(pieces)


def _has_digit_or_symbol(match: re.Match[str]) -> bool:
    token = match.group(2)
    return any(c.isdigit() or c in "._-~+/=" for c in token) or len(token) >= 24


def _is_basic_credential(match: re.Match[str]) -> bool:
    try:
        decoded = base64.b64decode(match.group(2) + "==", validate=False)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


# ``name=value`` / ``name: value`` / ``"name": "value"`` in free text. Candidates are
# found on the lower-cased text by a pattern that starts with a secret-ish word and ends
# at the separator (one C-level scan; text without such a word yields nothing); each
# candidate's full name is then judged by the cached word rule, and the value is matched
# only after its name was judged secret.
_KV_HINT_WORDS = ("pass", "pwd", "secret", "token", "key", "auth", "cookie", "credential", "jwt", "bearer")
_KV_HINTS = "(?:" + "|".join(_KV_HINT_WORDS) + ")"
_KV_CANDIDATE = re.compile(_KV_HINTS + r"([a-z0-9_.\-]{0,63})[\"']?[ \t]*[:=][ \t]*[\"']?")
_KV_CANDIDATE_ANY_CASE = re.compile("(?i)" + _KV_HINTS + r"([a-z0-9_.\-]{0,63})[\"']?[ \t]*[:=][ \t]*[\"']?")
_KV_VALUE = re.compile(r"[^\s\"',;&)}\]]{1,1000}")
_KV_NOT_SECRET_VALUES = frozenset({"none", "null", "true", "false", "nil", "undefined"})
_IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


class KeyValueRule:
    """Secret-named ``key=value`` pairs inside strings; only the value is replaced."""

    name = "key-value"
    marker = MARKER.format(rule="key-value")

    def present(self, text: str) -> bool:
        return "=" in text or ":" in text

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        marker = self.marker
        lowered = text.lower()
        # A few characters change length when lower-cased; search those texts case-blind.
        if len(lowered) == len(text):
            candidates = _KV_CANDIDATE.finditer(lowered)
        else:
            candidates = _KV_CANDIDATE_ANY_CASE.finditer(text)
        pieces: list[str] = []
        done = 0
        for match in candidates:
            if match.start() < done:
                continue
            start = match.start()
            floor = max(done, start - 64)
            while start > floor and text[start - 1] in _IDENT:
                start -= 1
            if start > 0 and text[start - 1] in _IDENT:
                continue  # a name longer than we judge, or inside a replaced value
            if not is_secret_key(text[start : match.end(1)], extra_keys):
                continue
            value = _KV_VALUE.match(text, match.end())
            if value is None:
                continue
            token = value.group(0)
            if token.startswith("[REDACTED") or token.lower() in _KV_NOT_SECRET_VALUES:
                continue
            counts[self.name] += 1
            pieces.append(text[done : value.start()])
            pieces.append(marker)
            done = value.end()
        if not pieces:
            return text
        pieces.append(text[done:])
        return "".join(pieces)


_B = r"(?<![A-Za-z0-9_\-])"  # a left boundary that also treats '-' and '_' as word parts

DEFAULT_VALUE_RULES: tuple[ValueRule, ...] = (
    ValueRule(
        "pem-private-key",
        "-----BEGIN ",
        re.compile(
            r"-----BEGIN ([A-Z0-9]+ ){0,4}PRIVATE KEY-----[A-Za-z0-9+/=\s\\]{0,20000}"
            r"(?:-----END ([A-Z0-9]+ ){0,4}PRIVATE KEY-----)?"
        ),
    ),
    ValueRule("anthropic", "sk-ant-", re.compile(_B + r"sk-ant-[A-Za-z0-9_\-]{20,400}")),
    ValueRule(
        "openai",
        "sk-",
        re.compile(_B + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,400}"),
    ),
    ValueRule(
        "stripe",
        ("sk_", "rk_"),
        re.compile(_B + r"[sr]k_(?:live|test)_[A-Za-z0-9]{10,200}"),
    ),
    ValueRule(
        "aws-access-key-id",
        ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA"),
        re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}(?![A-Z0-9])"),
    ),
    ValueRule(
        "github",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(_B + r"(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{40,255})"),
    ),
    ValueRule("google-api-key", "AIza", re.compile(_B + r"AIza[0-9A-Za-z_\-]{30,100}")),
    ValueRule("google-oauth", "ya29.", re.compile(_B + r"ya29\.[0-9A-Za-z_\-]{20,2000}")),
    ValueRule(
        "slack",
        ("xox", "xapp-"),
        re.compile(_B + r"(?:xox[abposre]|xapp)-[0-9A-Za-z\-]{10,300}"),
    ),
    ValueRule("huggingface", "hf_", re.compile(_B + r"hf_[A-Za-z0-9]{30,100}")),
    ValueRule(
        "jwt",
        "eyJ",
        re.compile(_B + r"eyJ[A-Za-z0-9_\-]{5,4000}\.eyJ[A-Za-z0-9_\-]{2,8000}(?:\.[A-Za-z0-9_\-]{0,2000})?"),
    ),
    ValueRule(
        "basic-auth",
        "Basic",
        re.compile(r"(Basic)[ \t]+([A-Za-z0-9+/]{8,1000}={0,2})"),
        group=2,
        check=_is_basic_credential,
    ),
    ValueRule(
        "bearer",
        ("Bearer", "bearer", "BEARER"),
        re.compile(r"(Bearer|bearer|BEARER)[ \t]+([A-Za-z0-9._~+/=\-]{8,4000})"),
        group=2,
        check=_has_digit_or_symbol,
    ),
    ValueRule(
        "url-credentials",
        "://",
        re.compile(r"://[^\s:/@]{0,256}:([^\s@/]{1,256})@"),
        group=1,
    ),
)


DEFAULT_RULES: tuple[ValueRule | KeyValueRule, ...] = (*DEFAULT_VALUE_RULES, KeyValueRule())


def _gate(literal: str) -> str:
    for gate in ("://", "-", "_", "."):
        if gate in literal:
            return gate
    if literal[:1] == "A" and literal.isupper():
        return "A"
    return literal


class Redactor:
    """Replaces secrets in any JSON-like value; counts what each rule replaced.

    ``extra_patterns`` are extra regular expressions (whole match replaced), ``extra_keys``
    extra key words, ``max_length`` cuts longer strings with ``truncation_marker``
    (``{removed}`` is the number of characters cut; ``None`` = never cut).
    Instances are stateless between calls and safe to share between threads.
    """

    def __init__(
        self,
        *,
        extra_patterns: Iterable[str | re.Pattern[str]] = (),
        extra_keys: Iterable[str] = (),
        max_length: int | None = None,
        truncation_marker: str = TRUNCATION_MARKER,
        rules: Iterable[ValueRule | KeyValueRule] | None = None,
    ):
        self.rules: list[ValueRule | KeyValueRule] = list(DEFAULT_RULES if rules is None else rules)
        for i, pattern in enumerate(extra_patterns):
            compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            self.rules.append(ValueRule(f"custom-{i + 1}", "", compiled))
        self.extra_keys = frozenset(k.lower() for k in extra_keys)
        self.rule_set = tuple(self.rules)
        # Key-value pairs run last, on text the shape rules have already cleaned.
        kv = [rule for rule in self.rules if isinstance(rule, KeyValueRule)]
        self._key_value = kv[0] if kv else None
        self.rules = [rule for rule in self.rules if not isinstance(rule, KeyValueRule)]
        self._by_literal: dict[str, list[ValueRule]] = {}
        self._always: set[ValueRule] = set()
        for rule in self.rules:
            literals = (rule.literal,) if isinstance(rule.literal, str) else rule.literal
            if not all(literals):
                self._always.add(rule)
                continue
            for literal in literals:
                self._by_literal.setdefault(literal, []).append(rule)
        # Literals are grouped behind a shorter "gate" substring they all contain, so
        # ordinary text pays for ten substring tests rather than thirty.
        gates: dict[str, list[tuple[str, list[ValueRule]]]] = {}
        for literal, rules_for_literal in self._by_literal.items():
            gates.setdefault(_gate(literal), []).append((literal, rules_for_literal))
        self._gates = list(gates.items())
        self.max_length = max_length
        self.truncation_marker = truncation_marker
        marker = re.escape(truncation_marker).replace(re.escape("{removed}"), r"\d+")
        self._cut = re.compile(marker + r"\Z")

    # -- public API --------------------------------------------------------------

    def redact(self, obj: Any) -> Any:
        return self.redact_with_counts(obj)[0]

    def redact_with_counts(self, obj: Any) -> tuple[Any, Counter[str]]:
        counts: Counter[str] = Counter()
        return self._walk(obj, counts), counts

    def redact_with_report(self, obj: Any, path: str = "$") -> tuple[Any, Counter[str], list[dict[str, Any]]]:
        """Like ``redact_with_counts``, plus which fields changed and by which rules:
        ``[{"path": "$.iterations[0].thought", "rules": {"openai": 1}}]`` (never the values)."""
        counts: Counter[str] = Counter()
        fields: list[dict[str, Any]] = []
        return self._walk_report(obj, counts, path, fields), counts, fields

    def _walk_report(self, obj: Any, counts: Counter[str], path: str, fields: list[dict[str, Any]]) -> Any:
        if isinstance(obj, str):
            local: Counter[str] = Counter()
            cleaned = self.redact_text(obj, local)
            if local:
                fields.append({"path": path, "rules": dict(local)})
                counts.update(local)
            return cleaned
        if isinstance(obj, dict):
            out = {}
            for key, value in obj.items():
                child = f"{path}.{key}"
                if isinstance(key, str) and self.is_secret_key(key) and _has_content(value):
                    counts["secret-key"] += 1
                    fields.append({"path": child, "rules": {"secret-key": 1}})
                    out[key] = _SECRET_KEY_MARKER
                else:
                    out[key] = self._walk_report(value, counts, child, fields)
            return out
        if isinstance(obj, list | tuple):
            return [self._walk_report(v, counts, f"{path}[{i}]", fields) for i, v in enumerate(obj)]
        return obj

    def redact_text(self, text: str, counts: Counter[str] | None = None) -> str:
        counts = counts if counts is not None else Counter()
        # The cheap prefilter: plain substring tests (no call, no regex) decide which
        # rules run at all; most text meets none of their literals.
        wanted = None
        for gate, items in self._gates:
            if gate in text:
                for literal, rules in items:
                    if literal in text:
                        if wanted is None:
                            wanted = set()
                        wanted.update(rules)
        if wanted is not None or self._always:
            for rule in self.rules:
                if rule in self._always or (wanted is not None and rule in wanted):
                    text = rule.apply(text, counts, self.extra_keys)
        if self._key_value is not None and ("=" in text or ":" in text):
            lowered = text.lower()
            for hint in _KV_HINT_WORDS:
                if hint in lowered:
                    text = self._key_value.apply(text, counts, self.extra_keys)
                    break
        if self.max_length is not None and len(text) > self.max_length and not self._already_cut(text):
            removed = len(text) - self.max_length
            text = text[: self.max_length] + self.truncation_marker.format(removed=removed)
            counts["truncated"] += 1
        return text

    def _already_cut(self, text: str) -> bool:
        """A value this redactor cut before (re-sent as it was stored) is not cut again."""
        assert self.max_length is not None
        return len(text) <= self.max_length + 40 and self._cut.search(text, self.max_length) is not None

    def is_secret_key(self, key: str) -> bool:
        return is_secret_key(key, self.extra_keys)

    # -- internals ---------------------------------------------------------------

    def _walk(self, obj: Any, counts: Counter[str]) -> Any:
        # Exact type checks first: this runs once per value of a large transcript.
        kind = type(obj)
        if kind is str:
            return self.redact_text(obj, counts)
        if kind is dict or isinstance(obj, dict):
            out = {}
            for key, value in obj.items():
                if type(key) is str and self.is_secret_key(key) and _has_content(value):
                    counts["secret-key"] += 1
                    out[key] = _SECRET_KEY_MARKER
                else:
                    out[key] = self._walk(value, counts)
            return out
        if kind is list or kind is tuple or isinstance(obj, list | tuple):
            return [self._walk(v, counts) for v in obj]
        if isinstance(obj, str):
            return self.redact_text(str(obj), counts)
        return obj


def _has_content(value: Any) -> bool:
    # Numbers under secret-like keys are metrics ("time_to_first_token": 0.4), not secrets.
    if value is None or isinstance(value, bool | int | float):
        return False
    if isinstance(value, str):
        return bool(value) and not value.startswith("[REDACTED")
    return not (isinstance(value, dict | list) and not value)


_SECRET_KEY_MARKER = MARKER.format(rule="secret-key")
_default = Redactor()


def redact(obj: Any) -> Any:
    """A deep copy of ``obj`` with every secret replaced by ``[REDACTED:<rule>]``."""
    return _default.redact(obj)
