"""Secret redaction shared by the library and the server.

Two kinds of rule:

* **Key rules** replace the whole value stored under a secret-like key, at any depth.
  Keys are split into words (``snake_case``, ``kebab-case``, ``camelCase``,
  ``UPPER_CASE``) and judged by those words, never by substring, so ``session_id``,
  ``max_tokens``, ``author``, ``passage`` and ``secretary`` survive while ``api_key``,
  ``GITHUB_TOKEN`` and ``clientSecret`` do not.
* **Value rules** find known secret shapes inside any string (provider keys, JWTs,
  private-key blocks, ``Authorization``/``Cookie`` headers, ``Bearer``/``Basic``
  credentials, credentials in URLs, ``name=value`` pairs).

Object keys go through the value rules too (a token used as a key is as stored as one
used as a value); keys that redact to the same text stay distinct (``#2``). Redacting
redacted data changes nothing, which is what lets ``redact_history`` re-apply the rules
to a whole database.

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

from .records import LONE_SURROGATE

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
            start, end = match.span(self.group)
            # A match that starts at an earlier marker widens that redaction (a value an
            # older rule cut short): it is replaced but not counted a second time.
            if not text.startswith(_MARKER_START, start):
                counts[self.name] += 1
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
    # "basic" is an ordinary word: only a token that decodes to printable "user:password"
    # is a credential ("basic authentication" decodes to binary noise).
    token = match.group(2)
    try:
        decoded = base64.b64decode(token + "=" * (-len(token.rstrip("=")) % 4), validate=False).decode(
            "utf-8"
        )
    except (binascii.Error, ValueError):
        return False
    return ":" in decoded and decoded.isprintable()


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
    hints = _KV_HINT_WORDS
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


_MARKER_START = "[REDACTED:"
_MARKER = re.compile(r"\[REDACTED:[a-z0-9\-]{1,40}\]")
# A line end: real, or escaped once or more (a key quoted inside JSON inside a string).
_EOL = r"(?:\r?\n|\r|(?:\\{1,4}r)?\\{1,4}n)"
# The lines of a key block's body: "Name: value" headers (Proc-Type, DEK-Info, Version,
# Comment), base64 lines and the PGP "=checksum", blank lines, any indentation.
_BLOCK_BODY = re.compile(
    r"(?:[ \t]{0,64}(?:[A-Za-z0-9][A-Za-z0-9\-]{0,63}:[^\r\n\\]{0,1000}|[A-Za-z0-9+/=]{1,1000}[ \t]{0,64})?"
    + _EOL
    + r")*(?:[ \t]{0,64}[A-Za-z0-9+/=]{1,1000})?"
)
# An armoured key is at most a few KB; an end line farther away than this is not its own.
MAX_BLOCK_CHARS = 65_536


class BlockRule:
    """A multi-line secret block (PEM, OpenSSH, PGP, SSH2 or PuTTY private keys), replaced
    whole: from its first line through its end line, or, when the end line is missing,
    through the lines shaped like its body (a truncated key goes too).

    Each stretch of text is scanned once: the search for an end line stops at the next
    block's first line, so the rule stays linear however many blocks a text holds. A
    ``[REDACTED:<name>]`` marker followed by an end line (left by an older, narrower rule)
    is widened through that end line, without counting the secret again.
    """

    def __init__(self, name: str, literal: str, begin: str, end: str):
        self.name = name
        self.literal = literal
        self.marker = MARKER.format(rule=name)
        self.begin = re.compile(rf"{begin}|{re.escape(self.marker)}")
        self.end = re.compile(end)

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        pieces: list[str] = []
        done = 0
        begin = self.begin.search(text)
        while begin is not None:
            body = begin.end()
            following = self.begin.search(text, body)
            limit = following.start() if following is not None else len(text)
            end = self.end.search(text, body, min(limit, body + MAX_BLOCK_CHARS))
            widening = begin.group() == self.marker
            if end is not None:
                stop = end.end()
            elif widening:
                begin = following
                continue
            else:
                stop = _BLOCK_BODY.match(text, body, limit).end()  # type: ignore[union-attr]
            if not widening:
                counts[self.name] += 1
            pieces += [text[done : begin.start()], self.marker]
            done = stop
            begin = following
        if not pieces:
            return text
        pieces.append(text[done:])
        return "".join(pieces)


_ARMOUR = r"-{{4,5}} ?{word} [A-Z0-9 ]{{0,60}}PRIVATE KEY[A-Z0-9 ]{{0,20}}-{{4,5}}"
PRIVATE_KEY_BLOCKS = (
    # -----BEGIN [RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP ]PRIVATE KEY[ BLOCK]-----, and
    # the SSH2 "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----".
    BlockRule("pem-private-key", "----", _ARMOUR.format(word="BEGIN"), _ARMOUR.format(word="END")),
    BlockRule(
        "putty-private-key",
        "PuTTY-User-Key-File-",
        r"PuTTY-User-Key-File-[0-9]{1,2}:",
        r"Private-MAC: ?[0-9A-Fa-f]{1,128}",
    ),
)

# Authorization and Cookie header values, also prefixed (Proxy-Authorization,
# X-Authorization, Set-Cookie), in any case.
_HEADER_NAME = re.compile(
    r"(?i)(?<![a-z0-9_\-])(?:[a-z0-9]{1,20}-){0,3}(?P<name>authori[sz]ation|cookie)"
    r"\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?"
)
_AUTH_SCHEME = re.compile(r"(?:[A-Za-z][A-Za-z0-9_\-]{0,30}|\[REDACTED:[a-z0-9\-]{1,40}\])[ \t]+")
_CREDENTIAL_TOKEN = re.compile(r"[^\s\"',;&\\{}\[\]()<>]{1,4000}")
# Parameters (Digest's username="…", response="…"; cookies' a=1; b=2) run to the line end.
_CREDENTIAL_PARAMS = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,40}=(?:[^\r\n\\]|\\(?![nr])){0,4000}")


class HeaderRule:
    """The credential of an ``Authorization:`` header with any scheme (Basic, Bearer,
    Token, Digest, AWS4-HMAC-SHA256…) in any case, and ``Cookie:`` values; the scheme
    stays readable. The shape rules run first, so a credential they already replaced is
    left as it is."""

    name = "auth-header"
    hints = ("auth", "cookie")
    marker = MARKER.format(rule="auth-header")

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        pieces: list[str] = []
        done = 0
        for header in _HEADER_NAME.finditer(text):
            pos = header.end()
            if pos < done:
                continue
            # Authorization values start with a scheme; cookies do not.
            scheme = None if header.group("name").lower() == "cookie" else _AUTH_SCHEME.match(text, pos)
            if scheme is not None:
                if text.startswith(_MARKER_START, scheme.end()):
                    continue  # a shape rule replaced the credential already
                if _CREDENTIAL_TOKEN.match(text, scheme.end()) or _CREDENTIAL_PARAMS.match(
                    text, scheme.end()
                ):
                    pos = scheme.end()
            value = _CREDENTIAL_PARAMS.match(text, pos) or _CREDENTIAL_TOKEN.match(text, pos)
            if (
                value is None
                or text.startswith(_MARKER_START, pos)
                or value.group().lower() in _KV_NOT_SECRET_VALUES
            ):
                continue
            counts[self.name] += 1
            pieces += [text[done:pos], self.marker]
            done = value.end()
        if not pieces:
            return text
        pieces.append(text[done:])
        return "".join(pieces)


_B = r"(?<![A-Za-z0-9_\-])"  # a left boundary that also treats '-' and '_' as word parts

DEFAULT_VALUE_RULES: tuple[ValueRule, ...] = (
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
        "asic",  # "AUTHORIZATION: BASIC …" is the header rule's
        re.compile(r"(?<![A-Za-z0-9])([Bb]asic|BASIC)[ \t]+([A-Za-z0-9+/]{8,1000}={0,2})(?![A-Za-z0-9+/=])"),
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
        # scheme://user:password@host, any scheme. The password may hold '@' and '/': it
        # runs to the last '@' followed by a host before a space, a quote or the next
        # "://" (an '@' later in the path widens the redaction rather than leaking part of
        # the password). "host:8080/path@x" is a port and a path, not a password.
        re.compile(
            r"://[^\s:/@?#\"]{0,256}:(?![0-9]{1,5}(?:[/?#\s\"]|\Z))((?:[^\s\":]|:(?!//)){1,256})@"
            r"(?=[A-Za-z0-9._~%\-]{1,256}(?![A-Za-z0-9._~%\-@]))"
        ),
        group=1,
    ),
)


Rule = ValueRule | BlockRule | HeaderRule | KeyValueRule
DEFAULT_RULES: tuple[Rule, ...] = (*PRIVATE_KEY_BLOCKS, *DEFAULT_VALUE_RULES, HeaderRule(), KeyValueRule())


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
        rules: Iterable[Rule] | None = None,
    ):
        self.rules: list[Rule] = list(DEFAULT_RULES if rules is None else rules)
        for i, pattern in enumerate(extra_patterns):
            compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            self.rules.append(ValueRule(f"custom-{i + 1}", "", compiled))
        self.extra_keys = frozenset(k.lower() for k in extra_keys)
        self.rule_set = tuple(self.rules)
        # Header values, then key-value pairs, run last, on text the shape rules have
        # already cleaned, and only when a name hint is present (header hints are a
        # subset of the key-value hints, so ordinary text pays for one set of tests).
        self._pairs = [rule for rule in self.rules if isinstance(rule, HeaderRule | KeyValueRule)]
        self._pairs.sort(key=lambda rule: isinstance(rule, KeyValueRule))
        self.rules = [rule for rule in self.rules if not isinstance(rule, HeaderRule | KeyValueRule)]
        self._by_literal: dict[str, list[Rule]] = {}
        self._always: set[Rule] = set()
        for rule in self.rules:
            literals = (rule.literal,) if isinstance(rule.literal, str) else rule.literal
            if not all(literals):
                self._always.add(rule)
                continue
            for literal in literals:
                self._by_literal.setdefault(literal, []).append(rule)
        # Literals are grouped behind a shorter "gate" substring they all contain, so
        # ordinary text pays for ten substring tests rather than thirty.
        gates: dict[str, list[tuple[str, list[Rule]]]] = {}
        for literal, rules_for_literal in self._by_literal.items():
            gates.setdefault(_gate(literal), []).append((literal, rules_for_literal))
        self._gates = list(gates.items())
        self.rule_names = frozenset(
            {rule.name for rule in self.rule_set} | {_SECRET_KEY_RULE, "truncated", LONE_SURROGATE}
        )
        # Object keys repeat across a transcript; their redaction is computed once.
        self._key = functools.lru_cache(maxsize=4096)(self._redact_key)
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
            out: dict[Any, Any] = {}
            for key, value in obj.items():
                new_key, key_counts, secret = self._key(key) if isinstance(key, str) else (key, (), False)
                new_key = _distinct(out, new_key)
                child = f"{path}.{new_key}"
                if key_counts:
                    counts.update(dict(key_counts))
                    fields.append({"path": child, "rules": dict(key_counts), "part": "key"})
                if secret and _has_content(value):
                    counts[_SECRET_KEY_RULE] += 1
                    fields.append({"path": child, "rules": {_SECRET_KEY_RULE: 1}})
                    out[new_key] = _SECRET_KEY_MARKER
                else:
                    out[new_key] = self._walk_report(value, counts, child, fields)
            return out
        if isinstance(obj, list | tuple):
            return [self._walk_report(v, counts, f"{path}[{i}]", fields) for i, v in enumerate(obj)]
        return obj

    def redact_text(self, text: str, counts: Counter[str] | None = None) -> str:
        counts = counts if counts is not None else Counter()
        text = self._redact_shapes(text, counts)
        if self.max_length is not None and len(text) > self.max_length and not self._already_cut(text):
            removed = len(text) - self.max_length
            text = text[: self.max_length] + self.truncation_marker.format(removed=removed)
            counts["truncated"] += 1
        return text

    def known_counts(self, counts: dict[str, Any]) -> Counter[str]:
        """The entries of a client's ``redactions`` map that name a rule (ours, or a
        client's ``custom-N``); anything else (a value used as a key) is dropped."""
        return Counter(
            {
                name: n
                for name, n in counts.items()
                if type(n) is int and n > 0 and (name in self.rule_names or _CUSTOM_RULE.fullmatch(name))
            }
        )

    def _redact_key(self, key: str) -> tuple[str, tuple[tuple[str, int], ...], bool]:
        """A key redacted like a value (every shape and key-value rule, never cut), the
        counts, and whether the key names a secret (which replaces its value)."""
        counts: Counter[str] = Counter()
        cleaned = self._redact_shapes(key, counts)
        # Judged without the markers, so a second pass judges the key as the first did
        # ("[REDACTED:jwt]" is not a key named "jwt").
        named = _MARKER.sub(" ", cleaned) if _MARKER_START in cleaned else cleaned
        return cleaned, tuple(counts.items()), self.is_secret_key(named)

    def _redact_shapes(self, text: str, counts: Counter[str]) -> str:
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
        if self._pairs and ("=" in text or ":" in text):
            lowered = text.lower()
            if any(hint in lowered for hint in _KV_HINT_WORDS):
                for rule in self._pairs:
                    if any(hint in lowered for hint in rule.hints):
                        text = rule.apply(text, counts, self.extra_keys)
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
            out: dict[Any, Any] = {}
            for key, value in obj.items():
                new_key = key
                if type(key) is str:
                    new_key, key_counts, secret = self._key(key)
                    if key_counts:
                        counts.update(dict(key_counts))
                    if new_key in out:
                        new_key = _distinct(out, new_key)
                    if secret and _has_content(value):
                        counts[_SECRET_KEY_RULE] += 1
                        out[new_key] = _SECRET_KEY_MARKER
                        continue
                out[new_key] = self._walk(value, counts)
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


def _distinct(out: dict[Any, Any], key: Any) -> Any:
    """Two keys redacted to the same marker stay two keys: ``[REDACTED:slack]#2``."""
    if key not in out:
        return key
    n = 2
    while f"{key}#{n}" in out:
        n += 1
    return f"{key}#{n}"


_SECRET_KEY_RULE = "secret-key"
_SECRET_KEY_MARKER = MARKER.format(rule=_SECRET_KEY_RULE)
_CUSTOM_RULE = re.compile(r"custom-[0-9]{1,4}")
_default = Redactor()


def redact(obj: Any) -> Any:
    """A deep copy of ``obj`` with every secret replaced by ``[REDACTED:<rule>]``."""
    return _default.redact(obj)
