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
import copy
import functools
import html
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

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
        "passcode",
        "sessionid",
        "sessid",
        "phpsessid",
        "jsessionid",
        "csrftoken",
        "xsrftoken",
    }
)
# Whole keys (any case, as written) that hold a secret though their words do not say so:
# session cookies. "session_id" is an identifier and stays; "sessionId"/"sessionid" and a
# bare "session" are what web frameworks name their session cookie.
_SECRET_WHOLE_KEYS = frozenset({"session", "sessionid", "sessid", "csrf", "xsrf"})
# A one-word key ending in one of these ("mysecret", "csrftoken", "dbpassword") names a
# secret; "secretary" or "tokens" do not end so.
_SECRET_SUFFIXES = ("secret", "password", "passwd", "passphrase", "token", "apikey", "credential")
# "<prefix>pass" is a password for these prefixes ("userpass", "dbpass"); "bypass",
# "compass", "trespass" are words.
_PASS_PREFIXES = frozenset(
    {"user", "db", "root", "admin", "my", "smtp", "mail", "ftp", "sql", "mysql", "pg", "redis",
     "mongo", "login", "app", "ldap", "wifi", "proxy", "api", "master", "sudo", "web", "auth"}
)  # fmt: skip
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
        "ref",
        "refs",
        "reference",
        "stdin",
        "prompt",
        "field",
        "fields",
        "placeholder",
        "label",
        "algorithm",
        "algorithms",
        "algo",
        "alg",
        "rounds",
        "iterations",
        "format",
        "valid",
        "invalid",
        "validation",
        "validator",
    }
)
# Words that describe a secret wherever they follow its word ("token_expires_in").
_DESCRIBING = frozenset(
    {
        "expires",
        "expiry",
        "expiration",
        "ttl",
        "lifetime",
        "count",
        "length",
        "type",
        "timeout",
        "age",
        "reset",
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
        "parameter",
    }
)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_OTP_WORDS = _words("totp hotp otp mfa 2fa")
_STORAGE_ACCOUNTS = _words("azure account accounts")


# Secret words that can qualify another noun; the key is secret when a later word is one
# of these nouns ("secret_access_key", "auth_token") or the word comes last
# ("client_secret"), but not otherwise ("secret_santa", "auth_user").
_SECRET_NOUNS = _words(
    "key keys token tokens value values password pass passphrase phrase string str code hash"
    " salt seed material bytes data id b64 base64 hex text access"
)
_MODIFIED_NOUNS = {
    "secret": _SECRET_NOUNS,
    "auth": _words(
        "token key header headers code string value data cookie hash b64 base64 param params"
        " bearer basic digest"
    ),
}
# Letters that look like ASCII ones, for judging names only (never written back): the
# Cyrillic and Greek look-alikes of Latin letters, and every letter or digit that NFKC
# writes as one ASCII character (full-width ｐａｓｓ, mathematical 𝐩𝐚𝐬𝐬, circled ⓟ).
_LOOKALIKE_LETTERS = "аеорсухѕіјԁһԛԝӏвкмнтАВЕКМНОРСТХЅІЈοναιρκτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ"
_LOOKALIKES = dict(
    zip(
        _LOOKALIKE_LETTERS,
        "aeopcyxsijdhqwlbkmhtABEKMHOPCTXSIJovaipktuxABEZHIKMNOPTYX",
        strict=True,
    )
)
for _block in ((0xFF01, 0xFF5F), (0x1D400, 0x1D800), (0x2460, 0x24EA), (0x2070, 0x20A0)):
    for _code in range(*_block):
        _folded = unicodedata.normalize("NFKC", chr(_code))
        if len(_folded) == 1 and _folded.isascii() and _folded.isprintable():
            _LOOKALIKES[chr(_code)] = _folded
# An invisible character beside a visible ASCII one (inside a key, a name); and the
# backslashes of a Markdown-escaped underscore inside a word (also escaped again, as JSON
# writes them). Zero-width joiners between emoji are left alone.
_INVISIBLE_IN_WORD = re.compile(
    "(?<=[\x21-\x7e])[\u200b\u200c\u200d\u2060\ufeff\u00ad]{1,64}"
    "|[\u200b\u200c\u200d\u2060\ufeff\u00ad]{1,64}(?=[\x21-\x7e])"
    # …and as JSON escapes them inside a string inside a string ("\\u200b").
    r"|(?<=[A-Za-z0-9_\-])\\{1,4}u(?:200[bBcCdD]|2060|[fF][eE][fF][fF]|00[aA][dD])(?=[A-Za-z0-9_\-])"
)
# A look-alike letter as JSON escapes it ("p\\u0430ssword" inside a string inside a string).
_ESCAPED_LOOKALIKE = re.compile(
    r"\\u(0[34][0-9a-fA-F]{2}|[fF][fF][0-5][0-9a-fA-F]|24[5-9a-eA-E][0-9a-fA-F])"
    # a mathematical letter (outside the BMP) as JSON writes it: a surrogate pair
    r"|\\u[dD]835\\u([dD][c-fC-F][0-9a-fA-F]{2})"
)


def _unescape_lookalike(match: re.Match[str]) -> str:
    if match.group(2) is not None:
        char = chr(0x1D400 + int(match.group(2), 16) - 0xDC00)
    else:
        char = chr(int(match.group(1), 16))
    return char if char in _LOOKALIKES else match.group()


# A '-' or '_' written as an HTML entity, percent-encoded or JSON-escaped, inside a word.
_ENCODED_IN_WORD = re.compile(
    r"(?<=[A-Za-z0-9])(?:&#(?:45|95|[xX]2[dD]|[xX]5[fF]);|%(?:2[dD]|5[fF])|\\{1,4}u00(?:2[dD]|5[fF]))(?=[A-Za-z0-9])"
)


_PERCENT_SEPARATOR = re.compile(r"%(?:2[dD]|5[fF])")


def _may_encode_a_separator(text: str) -> bool:
    """Whether ``text`` may hold an HTML entity or a percent-encoding of '-' or '_': found
    by single characters first (``memchr``), since "50%" and "&" are common in prose and
    a two-character search reads every character."""
    return ("&" in text and "&#" in text) or ("%" in text and _PERCENT_SEPARATOR.search(text) is not None)


# An HTML entity or a percent-encoding of what a pair or a URL is written with: '=' ':'
# '"' '&' '@' '/' ' ' '<' and '%' itself (double encoding).
_PERCENT_PAIR = re.compile(r"%(?:3[dDaA]|2[02567fF]|40|3[cC])")
_ENTITY_PAIR = re.compile(
    r"&(?:#(?:0{0,4}(?:61|58|34|39|38|64|47)|[xX]0{0,4}(?:3[dDaA]|2[2267fF]|40));|quot;|amp;|lt;|apos;|equals;|colon;)"
)


# Either of the above, in one search each (redact_text's test of most strings).
_ENCODED_ENTITY = re.compile(r"&(?:#|quot;|amp;|lt;|apos;|equals;|colon;)")
_PERCENT_ENCODED = re.compile(r"%(?:2[0-9a-fA-F]|5[fF]|3[aAcCdD]|40)")


def _may_encode_a_pair(text: str) -> bool:
    """Whether ``text`` may hide a pair or a URL in HTML entities or percent-encodings; the
    single characters first (``memchr``): most text holds neither '&' nor '%'."""
    return ("&" in text and _ENTITY_PAIR.search(text) is not None) or (
        "%" in text and _PERCENT_PAIR.search(text) is not None
    )


def _decoded_separator(match: re.Match[str]) -> str:
    code = match.group().lower()
    return "-" if code.endswith(("45;", "2d;", "2d")) else "_"


_ESCAPED_UNDERSCORE = re.compile(r"(?<=[A-Za-z0-9])\\{1,4}(?=_[A-Za-z0-9])")
# Characters that show nothing: zero-width space, non-joiner, joiner, word joiner, BOM,
# soft hyphen. Inside a word they hide it from a search.
INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
_FOLD_TABLE = str.maketrans(
    {**{ord(k): v for k, v in _LOOKALIKES.items()}, **dict.fromkeys(map(ord, INVISIBLE))}
)
# The same, one character for one (invisible characters left in place): positions in the
# folded text are positions in the original.
_LOOKALIKE_TABLE = str.maketrans({ord(k): v for k, v in _LOOKALIKES.items()})
_HAS_LOOKALIKE = re.compile("[" + "".join(sorted(set(_LOOKALIKES))) + "]")
# A Cyrillic or Greek look-alike letter beside an ASCII token character: inside a token
# ("ѕk-proj-…"). Found in two steps: such a letter anywhere (one scan of a character set),
# then one beside a token character.
_HAS_TOKEN_LOOKALIKE = re.compile(f"[{_LOOKALIKE_LETTERS}]")
_LOOKALIKE_IN_WORD = re.compile(
    f"(?<=[A-Za-z0-9_\\-])[{_LOOKALIKE_LETTERS}]|[{_LOOKALIKE_LETTERS}](?=[A-Za-z0-9_\\-])"
)


def _as_ascii(match: re.Match[str]) -> str:
    return _LOOKALIKES[match.group()]


def fold_lookalikes(text: str) -> str:
    """``text`` with invisible characters removed and look-alike letters written as the
    ASCII letters they imitate: how a name is judged ("pаssword" with a Cyrillic "а",
    "pass\u200bword", "ｐａｓｓｗｏｒｄ" are "password")."""
    return text.translate(_FOLD_TABLE)


_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def key_words(key: str) -> list[str]:
    return [w.lower() for part in _WORD_SPLIT.split(key) for w in _CAMEL.findall(part)]


def is_secret_key(key: str, extra_words: frozenset[str] = frozenset()) -> bool:
    """True when a mapping key names a secret (judged by whole words, not substrings)."""
    return _is_secret_key(key, extra_words)


@functools.lru_cache(maxsize=4096)
def _is_secret_key(key: str, extra_words: frozenset[str]) -> bool:
    if not key.isascii():
        key = fold_lookalikes(key)
    words = key_words(key)
    if not words:
        return False
    if key.lower() in _SECRET_WHOLE_KEYS:
        return True
    last = words[-1]
    if last in _NEUTRAL_LAST_WORDS and len(words) > 1:
        return False
    secret_words = _SECRET_WORDS.union(extra_words) if extra_words else _SECRET_WORDS
    # "access_token_expires_in", "secret_key_ref_name": a word after the last secret word
    # that describes it makes the key a description.
    last_secret = max((i for i, w in enumerate(words) if w in secret_words), default=-1)
    if 0 <= last_secret < len(words) - 1 and any(w in _DESCRIBING for w in words[last_secret + 1 :]):
        return False
    for i, word in enumerate(words):
        if word in secret_words:
            nouns = _MODIFIED_NOUNS.get(word)
            # "secret_santa", "auth_user": the word qualifies a noun that holds no secret.
            if nouns is None or i == len(words) - 1:
                return True
            if any(w in nouns or w in secret_words for w in words[i + 1 :]):
                return True
    if len(words) == 1 and (
        last.endswith(_SECRET_SUFFIXES) or (last.endswith("pass") and last[:-4] in _PASS_PREFIXES)
    ):
        return True
    # A private key's id (a service account's "private_key_id"), a one-time-password seed.
    if any(words[i] == "private" and words[i + 1] == "key" for i in range(len(words) - 1)):
        return True
    if last == "seed" and len(words) > 1 and words[-2] in _OTP_WORDS:
        return True
    # "api key", "private key", "x-api-key", "STRIPE_KEY"; but not "sort_key" or "key"; an
    # account's storage key is a credential ("AZURE_STORAGE_KEY"), a storage key is not.
    if last == "key" and len(words) > 2 and words[-2] == "storage":
        return any(w in _STORAGE_ACCOUNTS for w in words[:-2])
    return last == "key" and len(words) > 1 and words[-2] not in _PLAIN_KEY_PREFIXES


@dataclass(frozen=True, eq=False)
class ValueRule:
    """A secret shape: ``literal`` is the cheap prefilter, ``pattern`` the exact match.

    ``group`` names the part of the match to replace (0 = all of it); ``check`` can veto
    a match (a ``Basic`` header must decode to ``user:password``); ``gate`` is a substring
    every match holds, tested before ``literal`` (by default chosen from the literal).
    """

    name: str
    literal: str | tuple[str, ...]
    pattern: re.Pattern[str]
    group: int = 0
    check: Callable[[re.Match[str]], bool] | None = None
    gate: str | None = None
    # A long token (20 characters or more): its literals are looked for only in text
    # that holds such a run, which ordinary prose does not (one scan for them all).
    long: bool = False

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


@dataclass(frozen=True, eq=False)
class FoldedValueRule(ValueRule):
    """A ``ValueRule`` matched in any letter case: its literals are looked for in the
    lowercased text (one cheap pass) and its pattern is case-insensitive."""

    def present(self, text: str, lowered: str | None = None) -> bool:
        lowered = text.lower() if lowered is None else lowered
        literals = (self.literal,) if isinstance(self.literal, str) else self.literal
        return any(lit in lowered for lit in literals)

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        if not self.present(text):
            return text
        return super().apply(text, counts, extra_keys)


_AUTH_PARAM = re.compile(r"[a-z_]{2,20}=(?:\\{0,7}\"|[a-z_]{1,40}(?:,|\Z))")


def _is_bearer_token(match: re.Match[str]) -> bool:
    """The token after ``Bearer`` (any case, any whitespace), up to the next whitespace:
    a secret when it holds a digit or a symbol, or is 16 letters or more, or 8 after
    ``Bearer``/``BEARER`` (a header), or mixes cases (``QZxyz``); a word ("of", "bonds.",
    "Of") is prose, so "Bearer of bad news" stays."""
    scheme, token = match.group(1), match.group(3)
    core = token.rstrip(".,;:!?)]}'\"")
    if not core or _is_placeholder(match.string[match.start(3) : match.start(3) + 200]):
        return False
    # "token_type: Bearer" then the next line's "expires_in: 3600": a key, not a token.
    if token.endswith(":") or ("\n" in match.group(2) and _KEY_AHEAD.match(token)):
        return False
    # A challenge's parameters (WWW-Authenticate: Bearer realm="example"), not a token.
    if _AUTH_PARAM.match(token):
        return False
    if not core.isalpha():
        return True
    if len(core) >= 16 or (scheme in ("Bearer", "BEARER") and len(core) >= 8):
        return True
    return not (core.islower() or core.istitle() or (core.isupper() and len(core) < 4))


_STRING_PREFIX = re.compile(r"[fFrRbBuU]{1,2}(?=[\"'])")
# What code or a template writes where a credential goes: ${{ secrets.X }}, {token},
# $TOKEN, <your-token>, `${token}`.
_PLACEHOLDER = re.compile(
    r"`?(?:\$\{|\{\{|\$\(|<%|#\{|%\(|%\{|\{[A-Za-z_][A-Za-z0-9_.]{0,100}\}|\$[A-Za-z_]|<[A-Za-z_][^<>\s]{0,100}>)"
)


def _is_placeholder(value: str) -> bool:
    return _PLACEHOLDER.match(value) is not None


# The line breaks and indentation of a wrapped base64 value (also escaped inside a string).
_WRAPPED = re.compile(r"\s+|\\{1,4}[nr]")
_KEY_AHEAD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}[:=]")


def _is_encoded_private_key(match: re.Match[str]) -> bool:
    start = _WRAPPED.sub("", match.group()[:400])[:120]
    try:
        decoded = base64.b64decode(start[: len(start) // 4 * 4])
    except (binascii.Error, ValueError):
        return False
    return b"PRIVATE KEY" in decoded


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
_KV_HINT_WORDS = (
    "pass", "pwd", "secret", "token", "key", "auth", "cookie", "credential", "jwt", "bearer", "sessionid", "sessid"
)  # fmt: skip
_KV_HINTS = "(?:" + "|".join(_KV_HINT_WORDS) + ")"
# After the name: its closing quote, perhaps escaped (JSON inside a string, once or more),
# and a subscript's bracket (os.environ["API_KEY"] = …); then the separator: = : => := ==
# != (and the full-width ： ＝, also as JSON writes them: \uff1a \uff1d) with spaces.
_KV_SEPARATOR = r"(?:\\{0,7}[\"'])?\]?[ \t]*(?P<sep>=>|:=|[!=]?==?|[:：＝]|\\{1,7}uff1[ad])[ \t]*"
_KV_CANDIDATE = re.compile(_KV_HINTS + r"([a-z0-9_.\-]{0,63})" + _KV_SEPARATOR)
_KV_CANDIDATE_ANY_CASE = re.compile("(?i)" + _KV_HINTS + r"([a-z0-9_.\-]{0,63})" + _KV_SEPARATOR)
# Separators that take an unquoted value; after =>, :=, == and != only a quoted string is
# a value ("token => token.trim()" and "if password == given" are code, not secrets).
_LOOSE_SEPARATORS = frozenset({":", "=", "：", "＝", "uff1a", "uff1d"})
# An unquoted value: up to a space, a quote, a delimiter or an escape that ends a line or
# a string inside a string ("\n", "\""); other backslashes belong to the value. An "&"
# ends it only where a query string's next pair or an entity follows ("?token=v&page=2",
# "&amp;"): elsewhere it is part of the value ("DB_PASSWORD=Tr0ub4dor&3xQz!").
# A value never starts with "&" (Rust's "secret: &[u8]" is a type).
#
# The other characters that end an unquoted value do so only where they end it: a quote,
# ';' or ',' followed by a space, the end, or the next pair ("Server=x;Password=y;Db=z",
# "{user: a, password: b}"), and a closing bracket that nothing in the value opened,
# followed by anything but a letter or a digit ("f(password=x)", "[token=x]"). Elsewhere
# they are part of the password ("Abc9x;cTail", "9x#k2$m(t)y_u+i", "Abc'def").
_VALUE_CHAR = r"[^\s\"',;&)}\]\\]|\\{1,8}(?![nrt\"'\\])"
_NEXT_NAME = r"[A-Za-z_][A-Za-z0-9_.\-\[\]]{0,64}"
_VALUE_TOKEN = re.compile(
    rf"(?:{_VALUE_CHAR})(?:\((?:[^\s()\"'\\]){{0,64}}\)|{_VALUE_CHAR}"
    rf"|&(?!{_NEXT_NAME}=|#?[A-Za-z0-9]{{1,10}};)"
    rf"|[;,](?!{_NEXT_NAME}[=:])(?=[A-Za-z0-9!#$%*+/?@^_~\-])"
    rf"|[\"')}}\]](?=[A-Za-z0-9])){{0,999}}"
)
# The rest of a config's line after the first word of its value (YAML, .env, INI).
_REST_OF_LINE = re.compile(r"(?:[^\r\n\"';\\]|\\{1,8}(?![nrt\"'\\])){0,1000}")
# …up to the next pair on it ("password: a b  user: bob").
_NEXT_PAIR = re.compile(r"[ \t][A-Za-z_][A-Za-z0-9_.\-]{0,63}[ \t]*[=:]")
MAX_QUOTED_VALUE = 1000
MAX_INNER_QUOTES = 8
# Values kept after a secret-like name: they say something about the secret rather than
# being one ("password: required", "token: none", "Authorization: missing").
_KV_NOT_SECRET_VALUES = _words(
    "none null true false nil undefined required optional missing empty unset unknown"
    " hidden masked redacted invalid incorrect wrong expired revoked blank changed"
    " provided needed n/a yes no ok set present absent enabled disabled default"
    " omitted encrypted hashed rotated valid"
)
_IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _closing_quote(text: str, start: int, quote: str) -> int:
    """Where a value opened by ``quote`` (a quote, or an escaped one) ends, or -1.

    The value stays on its line and within ``MAX_QUOTED_VALUE`` characters; a quote with
    one more backslash before it is an escaped quote inside the value, and a single quote
    followed by a letter or digit is an apostrophe ('I can't remember'). At most
    ``MAX_INNER_QUOTES`` such quotes are passed over, so the search stays short."""
    stop = min(len(text), start + MAX_QUOTED_VALUE)
    newline = text.find("\n", start, stop)
    if newline >= 0:
        stop = newline
    after = len(quote)
    apostrophes = quote[-1] == "'"
    pos = start
    for _ in range(MAX_INNER_QUOTES + 1):
        end = text.find(quote, pos, stop)
        if end < 0:
            return -1
        if (end > start and text[end - 1] == "\\") or (
            apostrophes and end + after < len(text) and text[end + after].isalnum()
        ):
            pos = end + 1
            continue
        return end
    return -1


def _value_span(
    text: str, pos: int, *, unquoted: bool = True, to_line_end: bool = False, backtick: bool = False
) -> tuple[int, int, bool] | None:
    """The value that starts at ``pos``: ``(start, end, quoted)`` or None.

    A quoted value (also with escaped quotes: JSON inside a string, once or more) runs to
    its closing quote, spaces included; one left open runs like an unquoted value (when
    those are taken: "the password 'cause…" has no value). An unquoted value is one word
    (``unquoted``), or, with ``to_line_end``, the rest of its line up to an earlier marker
    or the next pair. A triple-quoted string (TOML, Python) runs to its closing triple
    quote, over lines; with ``backtick``, a JavaScript template without a placeholder is a
    quoted value (one with ``${…}`` is code)."""
    n = len(text)
    prefix = _STRING_PREFIX.match(text, pos)  # Python's f"…", b'…', r"…"
    if prefix is not None:
        pos = prefix.end()
    slashes = pos
    while slashes < n and slashes - pos < 7 and text[slashes] == "\\":
        slashes += 1
    if slashes < n and text[slashes] in "\"'" and text.startswith(text[pos : slashes + 1] * 3, pos):
        triple = text[pos : slashes + 1] * 3  # TOML's and Python's """…""", also escaped
        end = text.find(triple, pos + len(triple), pos + len(triple) + MAX_QUOTED_VALUE)
        return (pos + len(triple), end, True) if end > pos + len(triple) else None
    if backtick and text.startswith("`", pos):
        stop = min(n, pos + 1 + MAX_QUOTED_VALUE)
        end = text.find("`", pos + 1, stop)
        if end <= pos + 1 or text.find("${", pos + 1, end) >= 0 or text.find("\n", pos + 1, end) >= 0:
            return None
        return pos + 1, end, True
    q = pos
    while q < n and q - pos < 8 and text[q] == "\\":
        q += 1
    if q < n and text[q] in "\"'":
        start = q + 1
        end = _closing_quote(text, start, text[pos:start])
        if end >= 0:
            # '"Password: " + pw + "…"' is code around a label, not a quoted value.
            if end == start or text[start] in " \t":
                return None
            return start, end, True
        if not unquoted:
            return None
        pos = start
    elif not unquoted:
        return None
    token = _VALUE_TOKEN.match(text, pos)
    if token is None:
        return None
    end = token.end()
    if to_line_end and end < n and text[end] in " \t":
        stop = _REST_OF_LINE.match(text, end).end()  # type: ignore[union-attr]
        marker = text.find(_MARKER_START, end, stop)
        if marker >= 0:
            stop = marker
        following = _NEXT_PAIR.search(text, end, stop)
        if following is not None:
            stop = following.start()
        while stop > end and text[stop - 1] in " \t":
            stop -= 1
        end = stop
    return pos, end, False


def _line_start(text: str, start: int) -> str:
    """What stands before ``start``, past spaces: "line" for a line start (real or escaped,
    "\\n" inside a string), ";" for a connection string's previous pair, else ""."""
    i = start
    while i > 0 and text[i - 1] in " \t":
        i -= 1
    if i == 0 or text[i - 1] in "\r\n":
        return "line"
    if text[i - 1] == ";":
        # "Server=db;Password=…" is a connection string's pair; "set -x; TOKEN=…" a command's.
        return ";" if i == start else ""
    return "line" if text[i - 1] in "nr" and i >= 2 and text[i - 2] == "\\" else ""


def _takes_the_line(text: str, start: int, name: str, separator: tuple[int, int]) -> bool:
    """Whether the unquoted value of the pair named ``name`` at ``start`` is the rest of its
    line: in a config's line (YAML's "name: value", .env's "UPPER_NAME=value", INI's
    "name = value") or a connection string's pair after a ';'; not in a log line's or a
    sentence's "name=value" ("token=abc user=bob", "token=abc and then…")."""
    where = _line_start(text, start)
    if where != "line":
        return where == ";"
    before, after = separator
    if text[before:after].lstrip("\\") in (":", "：", "uff1a"):
        return True
    spaced = text[before - 1 : before] in (" ", "\t") and text[after : after + 1] in (" ", "\t")
    return spaced or name.isupper()


def _is_kept_value(text: str, start: int, end: int, quoted: bool) -> bool:
    """A value that holds a marker already (an earlier rule replaced it), or a word that
    describes a secret (judged by its first word when the value is an unquoted rest of a
    line)."""
    if text.find(_MARKER_START, start, end) >= 0:
        return True
    value = text[start:end] if quoted else text[start:end].split(None, 1)[0]
    # A template fills the value in later: ${{ secrets.TOKEN }}, {{ vault_pw }}, $(cat f).
    return (
        value.lower() in _KV_NOT_SECRET_VALUES
        or value.startswith(_TEMPLATE_OPENERS)
        or (quoted and value.strip().lower() in _SCHEME_WORDS)  # "Bearer " + token
        or _is_placeholder_value(value)
    )


# What documentation writes where a secret goes: <your-api-key-here>, sk-..., your-key-here,
# ********, changeme; and what another tool left where one was: [REDACTED], ***REDACTED***.
_PLACEHOLDER_VALUE = re.compile(
    r"<[A-Za-z_][^<>\r\n]{0,99}>|[A-Za-z0-9_\-]{0,12}(?:\.{3}|…)|[*•]{3,}|(?i:your[-_][a-z0-9_\-]{1,60})"
    r"|(?i:change[-_]?me|change[-_]?it)|\[REDACTED[^\]\r\n]{0,40}\]|\*{1,3}REDACTED\*{1,3}"
)


def _is_placeholder_value(value: str) -> bool:
    return len(value) <= 120 and _PLACEHOLDER_VALUE.fullmatch(value) is not None


# How a template or a shell expansion starts (GitHub Actions, Jinja, Helm, shell, ERB,
# Ruby, Python's %-format).
_TEMPLATE_OPENERS = ("${", "{{", "$(", "<%", "#{", "%(", "{%", "%{")
# Type names after "name:" (an annotation, not a value): Python, TypeScript, Go, Rust,
# Java, C#, Pydantic. Compared lower-cased, after '&', '*' and a lifetime.
_TYPE_NAMES = _words(
    "str string bytes bytearray int integer number bigint float double decimal bool boolean"
    " char any unknown object none void never null undefined dict list tuple set mapping"
    " sequence iterable optional union literal callable option result vec box arc rc"
    " secretstr secretbytes securestring buffer uint8array array"
    " i8 i16 i32 i64 u8 u16 u32 u64 usize isize rune byte interface type struct"
)
# Words of code that start an expression rather than being a value.
_CODE_WORDS = _words(
    "await new yield async function lambda typeof require import return not this self cls"
    " const let var await! try"
)
# A plain identifier, a dotted reference (self.token, os.environ, config.api_key) and
# what follows it: a call's or a subscript's opening, or nothing.
_REFERENCE = re.compile(
    r"[A-Za-z_$][A-Za-z0-9_$]{0,200}((?:(?:[?!]?\.|::)[A-Za-z_$][A-Za-z0-9_$]{0,200}){0,20})([(\[]?)"
)
_ENV_REFERENCE = re.compile(r"\$[A-Z_][A-Z0-9_]{0,200}")
# After a type annotation, a default value: "password: str = 'x'".
_DEFAULT_AFTER_TYPE = re.compile(r"[^\S\r\n]{0,8}=[^\S\r\n]{0,8}(?=[\"'])")


_CMDLET = re.compile(r"(?:ConvertTo|ConvertFrom|Get|Read|New|Import|Export|Invoke)-[A-Z][A-Za-z]{1,40}")
_OPERATOR_AHEAD = re.compile(r"[ \t]{0,8}(?:[<>!=]=|&&|\|\||[<>+*/%?])")


def _is_code(text: str, start: int, end: int, name: str) -> bool:
    """Whether the unquoted value at ``start`` is code rather than a secret: a type
    (``password: str``), a call (``get_token()``), a subscript or an attribute
    (``os.environ["KEY"]``, ``self.token``), a variable named like the secret
    (``token = token``, ``api_key=api_key``), a keyword (``await getToken()``), an
    environment variable (``$GITHUB_TOKEN``), structure (``{``, ``[``, ``<your-key>``), a
    YAML block or tag (``|``, ``!vault``), or a mask (``********``)."""
    value = text[start:end].split(None, 1)[0] if start < end else ""
    if not value or value[0] in "{[(<|>!`":
        return True
    if value.lower() in ("bearer", "basic", "token", "digest"):  # "Bearer $TOKEN"
        rest = text[start + len(value) : start + len(value) + 200].lstrip(" \t")
        if _is_placeholder(rest) or rest.startswith("`"):
            return True
    if value.strip("*•xX") == "" and len(value) >= 3 or value.strip(".…") == "":
        return True
    if value.startswith(("./", "../", "~/")):  # a file's path (--from-file=password=./pw.txt)
        return True
    if _CMDLET.fullmatch(value):  # PowerShell: $pw = Read-Host -AsSecureString
        return True
    bare = value.lstrip("&*").removeprefix("'static").lstrip()
    base = re.split(r"[\[<|,;)=?]", bare, maxsplit=1)[0]
    if base.lower().rsplit(".", 1)[-1] in _TYPE_NAMES or value.lower() in _CODE_WORDS:
        return True
    if _ENV_REFERENCE.fullmatch(value):
        return True
    reference = _REFERENCE.match(value)
    if reference is None:
        return False
    dotted, opening = reference.group(1), reference.group(2)
    if opening:  # get_token(, os.environ[, bcrypt.hashpw(password.encode(
        # …but not a password that holds a bracket ("Abc9x(Tail", "Pa[ss9"): a call's or a
        # subscript's bracket is closed, not followed by a letter or a digit, or followed by
        # an argument list's comma (HTTPBasicAuth(username, password), ENC[AES256,data:…]).
        after = value[reference.end() : reference.end() + 1]
        closer = ")" if opening == "(" else "]"
        closed = value.find(closer, reference.end())
        return (
            bool(dotted)
            or not any(c.isdigit() for c in value[: reference.start(2)])  # round(x, get_token(
            or (closed >= 0 and not value[closed + 1 : closed + 2].isalnum())  # f(x), f(x).y
            or not after.isalnum()
            or any(c in "='\"" for c in value[reference.end() : closed if closed >= 0 else len(value)])
            or text[end : end + 1] in (",", closer)
        )
    if reference.end() != len(value):
        return False
    if (dotted and text[end : end + 1] in ("(", "[")) or text[end : end + 1] == "(":
        return True
    if dotted:
        # A dotted value followed by code punctuation or an operator, or naming a secret
        # (config.api_key, password.length >= 12).
        return (
            is_secret_key(value.rsplit(".", 1)[-1])
            or text[end : end + 1] in (")", ";", ",")
            or _OPERATOR_AHEAD.match(text, end) is not None
        )
    # A variable named like the secret: the name itself, one of its words, or an
    # identifier of several words that names a secret (api_key=OPENAI_API_KEY); a single
    # word ("password: secret") is a value.
    lowered = value.lower()
    if lowered == name.lower() or lowered in key_words(name):
        return True
    return len(key_words(value)) > 1 and is_secret_key(value)


def _replace_spans(text: str, spans: list[tuple[int, int]], marker: str) -> tuple[str, int]:
    """``text`` with each span replaced by ``marker`` (overlapping spans merged into the
    first), and how many were replaced."""
    spans.sort()
    pieces: list[str] = []
    done = 0
    for start, end in spans:
        if start < done:
            done = max(done, end)
            continue
        pieces += [text[done:start], marker]
        done = end
    if not pieces:
        return text, 0
    pieces.append(text[done:])
    return "".join(pieces), len(pieces) // 2


class _PairRule:
    """A rule that judges a name (a key, a flag, a tag) before it replaces a value. Pair
    rules run after the shape rules, on text those have cleaned, in ``order``; ``wants``
    is their cheap test on the lower-cased text."""

    name = ""
    order = 0

    def wants(self, text: str, lowered: str) -> bool:
        return True

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        raise NotImplementedError


class KeyValueRule(_PairRule):
    """Secret-named ``key=value`` pairs inside strings; only the value is replaced.

    Any separator of a config, a program or a dump (``=``, ``:``, ``=>``, ``:=``, ``==``,
    full-width ``：``), names quoted or escaped, quoted values with their spaces, and the
    rest of a config's line (``password: correct horse`` in YAML, ``DB_PASSWORD=…`` in
    .env, ``password = …`` in INI, a connection string's pair after a ';')."""

    name = "key-value"
    order = 1
    hints = _KV_HINT_WORDS
    marker = MARKER.format(rule="key-value")

    def wants(self, text: str, lowered: str) -> bool:
        return "=" in text or ":" in text or "：" in text or "＝" in text or "\\uff1" in lowered

    def present(self, text: str) -> bool:
        return self.wants(text, text)

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        lowered = _lowered(text)
        # A few characters change length when lower-cased; search those texts case-blind.
        if len(lowered) == len(text):
            candidates = _KV_CANDIDATE.finditer(lowered)
        else:
            candidates = _KV_CANDIDATE_ANY_CASE.finditer(text)
        # The name is walked back over in the folded text: "ΑΡΙ_ΚΕΥ" (Greek capitals) is
        # one name there.
        hay = lowered if len(lowered) == len(text) else text
        spans: list[tuple[int, int]] = []
        done = 0
        for match in candidates:
            if match.start() < done:
                continue
            start = match.start()
            floor = max(done, start - 64)
            while start > floor and hay[start - 1] in _IDENT:
                start -= 1
            if start > 0 and hay[start - 1] in _IDENT:
                continue  # a name longer than we judge, or inside a replaced value
            name = text[start : match.end(1)]
            if not is_secret_key(name, extra_keys) or text[start - 2 : start] == "${":
                continue  # ${DB_PASSWORD:-default} is the shell's, not a pair
            separator = match.group("sep")
            sep = separator.lstrip("\\")
            loose = sep in _LOOSE_SEPARATORS
            colon = sep in (":", "：", "uff1a")
            pos = match.end()
            span = _special_value(text, pos, colon) if text.startswith(_SPECIAL_STARTS, pos) else None
            if span is None and colon and text.startswith(("|", ">"), pos):
                span = _yaml_block(text, start, pos)  # secret: |, then indented lines
            if span is None and colon and text.startswith(("&", "!"), pos):
                # YAML: an anchor or a tag before the value ("password: &pw x", "!!str x").
                properties = _YAML_PROPERTIES.match(text, pos)
                if properties is not None:
                    if _YAML_LOCAL_TAG.search(properties.group()):
                        continue  # !vault, !Ref, !secret: encrypted, or a reference to the value
                    pos = properties.end()
            if span is None:
                whole = loose and name[:1] != "-" and _takes_the_line(text, start, name, match.span("sep"))
                span = _value_span(text, pos, unquoted=loose, to_line_end=whole, backtick=loose)
                if span is not None and whole and not span[2]:
                    span = _before_a_command(text, *span)
                if span is None or _is_kept_value(text, *span):
                    continue
                if (
                    span[2]
                    and text[span[0] - 2 : span[0] - 1] in ("f", "F")
                    and "{" in text[span[0] : span[1]]
                ):
                    continue  # an f-string: code that formats a value, not the value
                if not span[2]:
                    wrapped = _WRAPPED_LITERAL.match(text, span[0])
                    if wrapped is not None:  # let password = String::from("x");
                        span = (*wrapped.span(2), True)
                    else:
                        span = _unquoted_value(text, span, name, whole)
                    if span is None or _is_kept_value(text, *span):
                        continue
            elif _is_kept_value(text, *span):
                continue
            if _not_a_secret_here(text, start, name, span):
                continue
            spans.append(span[:2])
            done = span[1]
        if "variable" in lowered:
            # Terraform: variable "db_password" { … default = "x" }.
            for block in _HCL_VARIABLE.finditer(hay):
                if is_secret_key(text[block.start(1) : block.end(1)], extra_keys):
                    span = _special_value(text, block.end(), False)
                    if span is not None and not _is_kept_value(text, *span):
                        spans.append(span[:2])
        if not spans:
            return text
        text, replaced = _replace_spans(text, spans, self.marker)
        counts[self.name] += replaced
        return text


_PATH_LIKE = re.compile(r"[A-Za-z0-9_.\-]{1,100}(?:/[A-Za-z0-9_.\-]{1,100}){1,20}")


def _not_a_secret_here(text: str, start: int, name: str, span: tuple[int, int, bool]) -> bool:
    """A pair whose value the text around it says is no secret: a model's sampled token
    beside its "logprob", the "secret:" part of an ARN, a secret's id that is its path
    (AWS's SecretId='prod/db'), and Python's "pass: the statement…" in prose."""
    lowered = name.lower()
    if lowered == "token" and "logprob" in text[max(0, start - 200) : span[1] + 200]:
        return True
    if lowered in ("secret", "secrets") and text[start - 1 : start] == ":":
        # arn:aws:secretsmanager:region:account:secret:prod/db-AbCdEf
        begin = max(text.rfind(" ", 0, start), text.rfind("\n", 0, start), text.rfind('"', 0, start)) + 1
        if text.startswith("arn:", begin) or text.startswith("n:arn:", begin - 1):
            return True
    value = text[span[0] : span[1]]
    words = key_words(name)
    if words[-2:] in (["secret", "id"], ["secret", "name"], ["secret", "arn"]) and (
        _PATH_LIKE.fullmatch(value) or value.startswith("arn:")
    ):
        return True
    return lowered == "pass" and not span[2] and value.split(None, 1)[0].lower() in _ARG_PROSE_WORDS


# A literal wrapped in a string or secret type: String::from("x"), "x".to_string() is
# the value rule's, SecretStr("x"), new String("x"), Secret::new("x").
_WRAPPED_LITERAL = re.compile(
    r"(?:new[ \t]{1,8})?(?:String::from|String\.valueOf|String|str|Secret(?:String|Str|Bytes|Box)?(?:::new|\.new)?"
    r"|SecureString)\([ \t]{0,8}(\\{0,7}[\"'])([^\"'\r\n\\]{1,1000})\1[ \t]{0,8}\)"
)


# A YAML tag of the application's own (one '!'), not YAML's (!!str, !!binary).
_YAML_LOCAL_TAG = re.compile(r"(?:^|[ \t])![A-Za-z]")
# A YAML anchor or tag before a value.
_YAML_PROPERTIES = re.compile(r"(?:(?:&[A-Za-z0-9_\-]{1,64}|!{1,2}[A-Za-z0-9_\-]{1,64})[ \t]{1,8}){1,2}")
# A type annotation, then a default that is a string: "password: Optional[str] = 'x'",
# "const SECRET: &str = \"x\"", "static TOKEN: &'static str = \"x\"", "KEY: Final = 'x'".
_ANNOTATED_DEFAULT = re.compile(
    r"[&*]{0,2}(?:'[a-z_]{1,20}[ \t]{1,8})?[A-Za-z_][A-Za-z0-9_.\[\]<>,|&*' \t]{0,200}=(?!=)[ \t]{0,8}"
    r"(?=[bBrRuUfF]{0,2}\\{0,7}[\"'])"
)
# A heredoc's opening (HCL, shell, Ruby): <<EOT, <<-EOT, <<~'EOT'.
_HEREDOC = re.compile(r"<<[-~]?(\\{0,7}[\"']?)([A-Za-z_][A-Za-z0-9_]{0,40})\1[ \t]{0,8}(\r?\n|\\{1,4}n)")
MAX_HEREDOC_LINES = 200
# An object after a secret's name, and its default or value field: HCL's
# db_password = { default = "x" }, JSON's "db_password": {"default": "x"}.
_OBJECT_DEFAULT = re.compile(
    r"\{[^{}\[\]<>]{0,400}?(?<![A-Za-z0-9_])(?:\\{0,7}[\"'])?(?:default|value)(?:\\{0,7}[\"'])?[ \t]*[:=][ \t]*"
)
_SPECIAL_STARTS = ("<<", "{", "&", "*", "'", "_", *"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# The words that start an authorization's value: the credential is the next word.
_SCHEME_WORDS = _words("bearer basic token digest negotiate hoba mutual ntlm")
_DECIMAL = re.compile(r"-?[0-9]{1,20}\.[0-9]{1,20}")
# After a value at a line's start, what makes the rest of the line a command rather than
# more of the value ("PGPASSWORD=x psql -h db", "API_TOKEN=x ./deploy.sh").
_COMMANDS = _words(
    "psql mysql pg_dump pg_restore mongosh redis-cli node npm npx yarn pnpm python python3 pip uv"
    " poetry ruby bundle rails go cargo java mvn gradle dotnet php bash sh zsh make docker"
    " kubectl helm terraform ansible-playbook aws gcloud az gh git curl wget ssh scp rsync exec"
    " env sudo deno bun pytest"
)


_HCL_VARIABLE = re.compile(
    r"(?<![a-z0-9_])variable[ \t]{1,8}\\{0,7}\"([a-z0-9_\-]{1,128})\\{0,7}\"[ \t]{0,8}(?=\{)"
)


_YAML_BLOCK_HEADER = re.compile(r"[|>][-+0-9]{0,2}[ \t]{0,8}(?:#[^\r\n]{0,200})?(\r?\n|\\{1,4}n)")
MAX_BLOCK_LINES = 500


def _yaml_block(text: str, start: int, pos: int) -> tuple[int, int, bool] | None:
    """The lines of a YAML block scalar (``password: |`` or ``>-``) after the name at
    ``start``: those indented more than the name's line, blank lines between them included;
    also with "\n" escapes (the YAML inside a JSON string)."""
    header = _YAML_BLOCK_HEADER.match(text, pos)
    if header is None:
        return None
    eol = "\n" if header.group(1)[-1:] == "\n" and "\\" not in header.group(1) else header.group(1)
    line_start = text.rfind(eol, max(0, start - 200), start)
    if line_start >= 0:
        line_start += len(eol)
    elif eol[:1] == "\\":  # the first line of a string: after its opening quote
        line_start = text.rfind('"', max(0, start - 200), start) + 1
    else:
        line_start = 0
    # The block is what is indented deeper than the name's line ("  password: |", also
    # after words: "see secret: |").
    indent = len(text[line_start:start]) - len(text[line_start:start].lstrip(" "))
    first = last = -1
    line = header.end()
    for _ in range(MAX_BLOCK_LINES):
        end = text.find(eol, line, line + MAX_QUOTED_VALUE * 4)
        stop = len(text) if end < 0 else end
        content = text[line:stop].rstrip("\r")
        if content.strip(" "):
            if len(content) - len(content.lstrip(" ")) <= indent:
                break
            if first < 0:
                first = line + len(content) - len(content.lstrip(" "))
            last = line + len(content)
        if end < 0:
            break
        line = end + len(eol)
    return (first, last, True) if first >= 0 else None


def _special_value(text: str, pos: int, colon: bool) -> tuple[int, int, bool] | None:
    """A value written in a way of its own: a heredoc's body, an object's default or value
    field, or the string after a type annotation (only after ':')."""
    if text.startswith("<<", pos):
        opening = _HEREDOC.match(text, pos)
        if opening is None:
            return None
        word, eol = opening.group(2), opening.group(3)
        body = line = opening.end()
        for _ in range(MAX_HEREDOC_LINES):
            end = text.find(eol, line, line + MAX_QUOTED_VALUE)
            if text[line : len(text) if end < 0 else end].strip() == word:
                stop = line - len(eol)
                return (body, stop, True) if stop > body else None
            if end < 0:
                return None
            line = end + len(eol)
        return None
    if text.startswith("{", pos):
        field = _OBJECT_DEFAULT.match(text, pos)
        if field is None:
            return None
        span = _value_span(text, field.end())
        return span if span is not None and text.find("}", field.end(), span[1]) < 0 else None
    if colon:
        annotated = _ANNOTATED_DEFAULT.match(text, pos)
        if annotated is not None and "=" not in text[pos : annotated.end() - 1].rstrip(" \t=")[-1:]:
            return _value_span(text, annotated.end(), unquoted=False)
    return None


def _before_a_command(text: str, start: int, end: int, quoted: bool) -> tuple[int, int, bool]:
    """The value that took the rest of its line, cut back to its first word when what
    follows is a command: a path, a known program, or words with a flag."""
    first = text[start:end].split(None, 1)
    if len(first) < 2:
        return start, end, quoted
    rest = first[1].split()
    if rest[0].startswith(("./", "../", "/", "~/", "$", "&&", "|", ";")) or rest[0] in _COMMANDS:
        return start, start + len(first[0]), quoted
    if any(word[:1] == "-" and word[1:2].isalpha() or word[:2] == "--" for word in rest[:6]):
        return start, start + len(first[0]), quoted
    return start, end, quoted


def _unquoted_value(
    text: str, span: tuple[int, int, bool], name: str, whole: bool
) -> tuple[int, int, bool] | None:
    """The part of an unquoted value to replace, or None when it is none: code (a type, a
    call, an attribute, a variable), a decimal number (a metric, "time_to_first_token:
    0.42"), a word of prose in a sentence ("Keep the token: it will…"), or an
    authorization scheme, whose credential is the next word when it looks like one
    ("auth: Token x1y2", not "auth: token refreshed")."""
    start, end, _ = span
    if _is_code(text, start, end, name):
        return None
    first = text[start:end].split(None, 1)[0]
    if _DECIMAL.fullmatch(first):
        return None
    lowered = first.lower()
    if not whole and lowered in _ARG_PROSE_WORDS:
        return None
    if lowered in _SCHEME_WORDS:
        after = start + len(first)
        while after < len(text) and text[after] in " \t":
            after += 1
        token = _CREDENTIAL_TOKEN.match(text, after)
        if (
            token is None
            or text.startswith(_MARKER_START, after)
            or not _looks_like_credential(token.group())
        ):
            return None
        return after, token.end(), False
    return span


def _looks_like_credential(word: str) -> bool:
    """A word that reads as a credential rather than prose: it holds a digit or a symbol,
    mixes cases, or is 16 letters or more."""
    core = word.rstrip(".,;:!?)]}'\"")
    if not core or _is_placeholder(word):
        return False
    if not core.isalpha() or len(core) >= 16:
        return True
    return not (core.islower() or core.istitle() or core.isupper())


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
_CREDENTIAL_TOKEN = re.compile(
    r"[^\s\"',;&\\{}\[\]()<>](?:[^\s\"',;&\\{}\[\]()<>]|[\"',;}\])>](?=[A-Za-z0-9])){0,3999}"
)
# Parameters (Digest's username="…", response="…"; cookies' a=1; b=2) run to the line end.
_CREDENTIAL_PARAMS = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,40}=(?:[^\r\n\\]|\\(?![nr])){0,4000}")


class HeaderRule(_PairRule):
    """The credential of an ``Authorization:`` header with any scheme (Basic, Bearer,
    Token, Digest, AWS4-HMAC-SHA256…) in any case, and ``Cookie:`` values; the scheme
    stays readable. The shape rules run first, so a credential they already replaced is
    left as it is."""

    name = "auth-header"
    order = 0
    hints = ("auth", "cookie")
    marker = MARKER.format(rule="auth-header")

    def wants(self, text: str, lowered: str) -> bool:
        return ("=" in text or ":" in text) and ("auth" in lowered or "cookie" in lowered)

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        pieces: list[str] = []
        done = 0
        for header in _HEADER_NAME.finditer(text):
            pos = header.end()
            if pos < done:
                continue
            prefix = _STRING_PREFIX.match(text, pos)  # f"Bearer {token}" is code's string
            if prefix is not None:
                pos = prefix.end()
            if text.startswith("`", pos):  # a JavaScript template: `Bearer ${token}`
                pos += 1
            # Authorization values start with a scheme; cookies do not.
            scheme = None if header.group("name").lower() == "cookie" else _AUTH_SCHEME.match(text, pos)
            if scheme is not None:
                if text.startswith(_MARKER_START, scheme.end()):
                    continue  # a shape rule replaced the credential already
                if _is_placeholder(text[scheme.end() : scheme.end() + 200]):
                    continue
                if _CREDENTIAL_TOKEN.match(text, scheme.end()) or _CREDENTIAL_PARAMS.match(
                    text, scheme.end()
                ):
                    pos = scheme.end()
                elif scheme.group().strip().lower() in _SCHEME_WORDS:
                    continue  # "Bearer " + token: code adds the credential
            value = _CREDENTIAL_PARAMS.match(text, pos) or _CREDENTIAL_TOKEN.match(text, pos)
            if (
                value is None
                or value.group().lower() in _SCHEME_WORDS  # a bare "Authorization: Bearer"
                or text.startswith(_MARKER_START, pos)
                or value.group().lower() in _KV_NOT_SECRET_VALUES
                or _is_placeholder(text[pos : pos + 200])
            ):
                continue
            end = value.end()
            # A header in quotes (curl -H 'Cookie: a=1; b=2' https://x, "Cookie": "a=1")
            # ends at its closing quote, which stays with what follows it.
            opening = (
                header.group()
                if header.group()[-1] in "'\""
                else text[max(0, header.start() - 8) : header.start()]
            )
            if opening[-1:] in ("'", '"'):
                escaped = opening[-2:-1] == "\\"
                close = text.find(opening[-1], pos, end)
                # An escaped quote inside an unescaped one is the value's own (Digest's
                # username=\"u\" inside a JSON string).
                while close >= 0 and not escaped and text[close - 1] == "\\":
                    close = text.find(opening[-1], close + 1, end)
                if close >= 0:
                    end = close - 1 if escaped else close
                    if end <= pos:
                        continue
            counts[self.name] += 1
            pieces += [text[done:pos], self.marker]
            done = end
        if not pieces:
            return text
        pieces.append(text[done:])
        return "".join(pieces)


def _haystack(text: str, exact: re.Pattern[str], any_case: re.Pattern[str]) -> tuple[str, re.Pattern[str]]:
    """The lower-cased text and ``exact``, or, when lower-casing changes the length (a few
    characters do), the text itself and the case-blind ``any_case``."""
    lowered = _lowered(text)
    if len(lowered) == len(text):
        return lowered, exact
    return text, any_case


def _lowered(text: str) -> str:
    """``text`` lower-cased, its look-alike letters written as the ASCII ones they
    imitate (one character for one), so that "pаssword" (a Cyrillic "а") or "ＰＡＳＳ" is
    found where "password" would be; only names are judged on it, the text stays."""
    lowered = text.lower()
    if lowered.isascii() or not _HAS_LOOKALIKE.search(text):
        return lowered
    # Folded before lower-casing: a capital Greek letter lowers to another look-alike
    # ("Ν" is "N", its "ν" is "v").
    return text.translate(_LOOKALIKE_TABLE).lower()


def _both_cases(pattern: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    return re.compile(pattern), re.compile("(?i)" + pattern)


# ``{"name": "DB_PASSWORD", "value": "…"}`` and its kin in text: Kubernetes, ECS and
# GitHub Actions env lists (JSON or YAML), HAR headers, Postman variables, CloudFormation
# parameters, .NET <add key="…" value="…"/>. The value field is searched after the name
# field up to the end of the object (no brace, bracket or tag boundary in between, no
# second name field), or before it back to the object's opening brace.
_NV_FIELD_SEPARATOR = r"(?:\\{0,7}[\"'])?[ \t]*(?:=>|[:=：])[ \t]*"
_NV_NAME = _both_cases(
    r"(?<![a-z0-9_\-])(?:name|key|parameterkey|parametername|variable|varname|envname|header)"
    + _NV_FIELD_SEPARATOR
)
_NV_VALUE = _both_cases(r"(?<![a-z0-9_\-])(?:value|parametervalue|secretvalue|val)" + _NV_FIELD_SEPARATOR)
_NV_WINDOW = 400
_NV_NAME_MAX = 128


_TYPED_VALUE = re.compile(r"\{[ \t]{0,8}(\\{0,7}[\"'])[A-Za-z_]{1,40}\1[ \t]{0,8}:[ \t]{0,8}")


class NameValueRule(_PairRule):
    """The value field of an object whose name field names a secret, written as text."""

    name = "name-value"
    order = 2
    marker = MARKER.format(rule="name-value")

    def wants(self, text: str, lowered: str) -> bool:
        return "val" in lowered and ("=" in text or ":" in text or "：" in text)

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        hay, names = _haystack(text, *_NV_NAME)
        values = _NV_VALUE[0] if names is _NV_NAME[0] else _NV_VALUE[1]
        spans: list[tuple[int, int]] = []
        for field in names.finditer(hay):
            named = _value_span(text, field.end())
            if named is None:
                continue
            name = text[named[0] : named[1]]
            if len(name) > _NV_NAME_MAX or any(c.isspace() for c in name):
                continue
            if not is_secret_key(name, extra_keys):
                continue
            span = self._forward(text, hay, names, values, named[1]) or self._backward(
                text, hay, values, field.start()
            )
            if span is not None and not span[2] and text.startswith("{", span[0]):
                # A typed value (OTLP's "value": {"stringValue": "x"}): its string.
                typed = _TYPED_VALUE.match(text, span[0])
                span = _value_span(text, typed.end(), unquoted=False) if typed is not None else None
            if span is not None and not _is_kept_value(text, *span):
                spans.append(span[:2])
        if not spans:
            return text
        text, replaced = _replace_spans(text, spans, self.marker)
        counts[self.name] += replaced
        return text

    @staticmethod
    def _forward(
        text: str, hay: str, names: re.Pattern[str], values: re.Pattern[str], pos: int
    ) -> tuple[int, int, bool] | None:
        limit = min(len(text), pos + _NV_WINDOW)
        for boundary in "{}[]<>":
            found = text.find(boundary, pos, limit)
            if found >= 0:
                limit = found
        following = names.search(hay, pos, limit)
        if following is not None:
            limit = following.start()
        field = values.search(hay, pos, limit)
        if field is None:
            return None
        return _value_span(text, field.end(), to_line_end=_line_start(text, field.start()) == "line")

    @staticmethod
    def _backward(text: str, hay: str, values: re.Pattern[str], pos: int) -> tuple[int, int, bool] | None:
        floor = max(0, pos - _NV_WINDOW)
        opening = max(text.rfind("{", floor, pos), text.rfind("<", floor, pos))
        if opening < 0 or text.find("}", opening, pos) >= 0 or text.find(">", opening, pos) >= 0:
            return None
        fields = list(values.finditer(hay, opening, pos))
        if not fields:
            return None
        span = _value_span(text, fields[-1].end())
        return span if span is not None and span[1] <= pos else None


# <password>…</password>, <apiKey>…</apiKey>, <ns:ClientSecret>, CDATA, <entry
# key="db.password">…</entry>, <string name="api_key">…</string> (Android), plist
# <key>password</key><string>…</string>; also escaped as &lt;…&gt; and with "<\/" closing
# tags (JSON may escape '/'). Only an element's own text is replaced (no nested element).
_XML_OPEN = re.compile(r"<([A-Za-z_][A-Za-z0-9_.:\-]{0,80})([ \t\r\n][^<>]{0,1000})?>")
_XML_OPEN_ESCAPED = re.compile(
    r"&lt;([A-Za-z_][A-Za-z0-9_.:\-]{0,80})([ \t\r\n](?:[^<>&]|&(?!gt;)){0,1000})?&gt;"
)
_XML_NAME_ATTRIBUTE = re.compile(
    r"(?:^|[ \t\r\n])(?:key|name)[ \t]*=[ \t]*(?:\\{0,7}[\"']|&quot;)([^\"'<>&\\]{1,128})"
)
_PLIST_VALUE = re.compile(r"(?:\s|\\[nrt]){0,64}(<|&lt;)(string|data)(>|&gt;)")
MAX_ELEMENT_TEXT = 4000


class XmlRule(_PairRule):
    """The text of an element whose tag, or whose key/name attribute, names a secret."""

    name = "xml-value"
    order = 3
    marker = MARKER.format(rule="xml-value")

    def wants(self, text: str, lowered: str) -> bool:
        return "<" in text or "&lt;" in text

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        spans: list[tuple[int, int]] = []
        for opener, pattern in (("<", _XML_OPEN), ("&lt;", _XML_OPEN_ESCAPED)):
            if opener not in text:
                continue
            for tag in pattern.finditer(text):
                name, attributes = tag.group(1), tag.group(2) or ""
                if attributes.rstrip().endswith("/"):
                    continue
                local = name.rsplit(":", 1)[-1]
                secret = is_secret_key(local, extra_keys)
                if not secret and attributes:
                    named = _XML_NAME_ATTRIBUTE.search(attributes)
                    secret = named is not None and is_secret_key(named.group(1), extra_keys)
                plist = not secret and local.lower() == "key"
                if not secret and not plist:
                    continue
                end = _element_end(text, tag.end(), name, opener)
                if end < 0:
                    continue
                if plist:
                    if not is_secret_key(text[tag.end() : end].strip(), extra_keys):
                        continue
                    closer = ">" if opener == "<" else "&gt;"
                    value = _PLIST_VALUE.match(text, text.find(closer, end) + len(closer))
                    if value is None or value.group(1) != opener:
                        continue
                    start = value.end()
                    end = _element_end(text, start, value.group(2), opener)
                else:
                    start = tag.end()
                if end > start and text[start:end].strip() and not _is_kept_value(text, start, end, True):
                    spans.append((start, end))
        if not spans:
            return text
        text, replaced = _replace_spans(text, spans, self.marker)
        counts[self.name] += replaced
        return text


def _follows_word(hay: str, start: int, word: str) -> bool:
    """True when ``word`` (ending in a space) stands right before ``start``, as a word."""
    begin = start - len(word)
    return begin >= 0 and hay.startswith(word, begin) and (begin == 0 or hay[begin - 1] in " \t")


def _element_end(text: str, start: int, name: str, opener: str) -> int:
    """Where the text of the element ``name`` opened just before ``start`` ends (at its
    closing tag), or -1 when a child element or nothing closes it nearby."""
    limit = min(len(text), start + MAX_ELEMENT_TEXT)
    if text.startswith("<![CDATA[", start):
        cdata = text.find("]]>", start, limit)
        if cdata < 0:
            return -1
        end = cdata + 3
        if not text.startswith(opener, end):
            return -1
    else:
        end = text.find(opener, start, limit)
        if end < 0:
            return -1
    close = end + len(opener)
    if text.startswith("\\/", close):
        close += 2
    elif text.startswith("/", close):
        close += 1
    else:
        return -1
    if not text.startswith(name, close):
        return -1
    after = close + len(name)
    return end if after >= len(text) or text[after] in " \t\r\n>&" else -1


# Secrets passed as arguments: --password x, --api-key "x", -storepass x (keytool),
# -passin pass:x (openssl), "config set NAME VALUE" (npm, yarn, aws configure), a secret
# word followed by a quoted value (SQL's PASSWORD 'x', "the token 'x'"), and the flags of
# tools that take a password in their own way: curl -u user:pass, mysql -pSecret, sshpass
# -p, docker/podman/helm login -p, redis-cli -a, mongosh -p, SQL IDENTIFIED BY 'x'.
_ARG_CANDIDATE = _both_cases(_KV_HINTS + r"([a-z0-9_.\-]{0,40})[ \t]+")
# Flags whose name is a secret though its words are not (keytool, openssl).
_ARG_SECRET_FLAGS = _words(
    "storepass keypass srcstorepass deststorepass srckeypass destkeypass passin passout"
)
# Words after a flag in prose ("Use --password to pass it", "the --token flag is"): no value.
_ARG_PROSE_WORDS = _words(
    "a an and are as at be but by can does flag for from has here if in instead is it"
    " may must not of on only option or parameter argument should so that the then"
    " this to too was when which will with you first now later again before after up"
    " please properly correctly yourself"
)
_ARG_BEFORE_FLAG = frozenset(" \t\"'`([{,=")
_ARG_NOT_A_VALUE = frozenset("-|<>&;\\`(")
# Every pair rule needs one of these in its text: a separator, a flag's dash, a tag, a
# quote, a full-width separator, or "set NAME VALUE" (Redactor._redact_shapes spells them
# out, and these lists out for tests).
_PAIR_GATES = (":", "=", "-", "'", '"', "<", "&", "set", "\\", "：", "＝", "\n", " is ", " was ", "_")
_TOOL_TRIGGERS = (
    "curl",
    "mysql",
    "mariadb",
    "sshpass",
    "login",
    "redis-cli",
    "mongo",
    "http ",
    "https ",
    "openssl",
    "zip",
    "7z",
    "sqlcmd",
)
# What calls for the positional rule in text that names no secret (PositionalRule).
_POSITIONAL_TRIGGERS = ("rabbitmqctl", "getconnection")
_BOUNDED = r"(?<![a-z0-9_\-]){}(?![a-z0-9_\-])"
# (trigger, the tool in lower-cased text, its secret flag, what follows the flag)
_TOOLS: tuple[tuple[str, re.Pattern[str], re.Pattern[str], str], ...] = (
    (
        "curl",
        re.compile(_BOUNDED.format("curl")),
        # -u, and -u last in a cluster of short flags (-sSfu).
        re.compile(r"(?<![A-Za-z0-9_\-])(?:-[A-Za-z]{0,8}[uU][ \t]*|--(?:proxy-)?user(?:[ \t]+|=))"),
        "user:password",
    ),
    (
        "http ",  # HTTPie: http -a user:password
        re.compile(r"(?<![a-z0-9_\-./])http(?=[ \t])"),
        re.compile(r"(?<![A-Za-z0-9_\-])-[A-Za-z]{0,8}a[ \t]*"),
        "user:password",
    ),
    (
        "https ",
        re.compile(r"(?<![a-z0-9_\-./])https(?=[ \t])"),
        re.compile(r"(?<![A-Za-z0-9_\-])-[A-Za-z]{0,8}a[ \t]*"),
        "user:password",
    ),
    (
        "openssl",  # openssl enc -k password, -K hexkey
        re.compile(_BOUNDED.format("openssl")),
        re.compile(r"(?<![A-Za-z0-9_\-])-[kK](?:[ \t]+|(?=\\{0,7}[\"'][ \t]*,))"),
        "password",
    ),
    (
        "zip",  # zip -P password, unzip -P password
        re.compile(r"(?<![a-z0-9_\-])(?:un)?zip(?![a-z0-9_\-.])"),
        re.compile(r"(?<![A-Za-z0-9_\-])-P(?:[ \t]+|(?=\\{0,7}[\"'][ \t]*,))"),
        "password",
    ),
    (
        "7z",  # 7z a -pPASSWORD
        re.compile(r"(?<![a-z0-9_\-])7z[ar]?(?![a-z0-9_\-.])"),
        re.compile(r"(?<![A-Za-z0-9_\-])-p(?=[^\s\"'])"),
        "password",
    ),
    (
        "mysql",
        re.compile(r"(?<![a-z0-9_\-])mysql[a-z]{0,10}(?![a-z0-9_\-])"),
        re.compile(r"(?<![A-Za-z0-9_\-])-p(?=\S)"),
        "password",
    ),
    (
        "mariadb",
        re.compile(r"(?<![a-z0-9_\-])mariadb(?:-?[a-z]{1,10})?(?![a-z0-9_\-])"),
        re.compile(r"(?<![A-Za-z0-9_\-])-p(?=\S)"),
        "password",
    ),
    (
        "sshpass",
        re.compile(_BOUNDED.format("sshpass")),
        re.compile(r"(?<![A-Za-z0-9_\-])-p[ \t]*"),
        "password",
    ),
    (
        "login",
        re.compile(_BOUNDED.format("login")),
        re.compile(r"(?<![A-Za-z0-9_\-])-p(?:[ \t]+|(?=\\{0,7}[\"'][ \t]*,))"),
        "password",
    ),
    (
        "redis-cli",
        re.compile(_BOUNDED.format("redis-cli")),
        re.compile(r"(?<![A-Za-z0-9_\-])-a(?:[ \t]+|(?=\\{0,7}[\"'][ \t]*,))"),
        "password",
    ),
    (
        "mongo",
        re.compile(r"(?<![a-z0-9_\-])mongo[a-z]{0,10}(?![a-z0-9_\-])"),
        re.compile(r"(?<![A-Za-z0-9_\-])-p(?:[ \t]+|(?=\\{0,7}[\"'][ \t]*,))"),
        "password",
    ),
)
# (The comma after the name is looked ahead at, not taken: in ["psql", "--password", "x"]
# the comma after "psql" opens the next pair.)
_CALL_PAIR = re.compile(r"[(\[,][ \t]{0,8}(\\{0,7}[\"'])(-{0,2}[a-z0-9_.\-]{1,64})\1(?=[ \t]{0,8},)")
_METHOD_CALL = re.compile(r"\.([a-z_][a-z0-9_]{0,40})\([ \t]{0,8}(?=\\{0,7}[\"'])")
_NOT_SETTER_VERBS = _words(
    "get read load fetch find has is check verify validate compare hash encode decode encrypt decrypt"
    " generate gen create delete del remove reset revoke refresh rotate parse print log lookup list"
    " exists contains describe show mask redact strip match test require ensure assert expect"
)
_CALL_PAIR_COMMA = re.compile(r"[ \t]{0,8},[ \t]{0,8}")
_CALLEE = re.compile(r"[a-z_][a-z0-9_]{0,39}\Z")
# Calls whose first two arguments are a name and its value.
_SETTERS = (
    "set",
    "put",
    "env",
    "var",
    "default",
    "header",
    "item",
    "property",
    "store",
    "insert",
    "add",
    "secret",
    "define",  # PHP's define('DB_PASSWORD', 'x')
)
_REDIS_PASSWORD = re.compile(
    r"(?:(?<![A-Za-z0-9_])|(?<=\\n))-{0,2}(?:requirepass|masterauth)[ \t]{1,64}(\\{0,7}[\"']?)"
    r"(?![-$<`({])([^\s\"'\\]{1,256})\1(?![^\s\\;,)\]}\"'])"
)
_NEXT_ITEM = re.compile(r"\\{0,7}[\"'][ \t]{0,8},[ \t]{0,8}(?=\\{0,7}[\"'])")
_SET_WITH_FLAGS = re.compile(r"(?<![a-z0-9_\-])set(?:[ \t]{1,8}-{1,2}[a-z]{1,10}){1,4}[ \t]{1,8}\Z")
_IDENTIFIED_BY = _both_cases(
    r"(?<![a-z0-9_])identified[ \t]+(?:with[ \t]+[a-z0-9_]{1,64}[ \t]+)?by[ \t]+(?:password[ \t]+)?"
)
_COMMAND_END = re.compile(r"\r|\n|\\{1,8}[nr]")
MAX_COMMAND = 2000


class ArgumentRule(_PairRule):
    """Secrets given as arguments: flags, "config set", quoted values after a secret word,
    and the password flags of the tools in ``_TOOLS``. Unlike the other pair rules it also
    runs without a name hint (``mysql -pX`` names none)."""

    name = "secret-argument"
    order = 4
    marker = MARKER.format(rule="secret-argument")

    def wants(self, text: str, lowered: str) -> bool:
        return True

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        spans: list[tuple[int, int]] = []
        hay, candidates = _haystack(text, *_ARG_CANDIDATE)
        if any(hint in hay for hint in _KV_HINT_WORDS):
            self._named(text, hay, candidates, extra_keys, spans)
            if "(" in text or "[" in text:
                self._call_pairs(text, hay, extra_keys, spans)
            if "(" in text and "." in text:
                self._methods(text, hay, extra_keys, spans)
        if _has_a_flag(text):
            for trigger, tool, flag, shape in _TOOLS:
                if trigger in hay:
                    self._tool(text, hay, tool, flag, shape, spans)
        if "requirepass" in hay or "masterauth" in hay:
            # redis: its config file's "requirepass x" and its flags.
            for match in _REDIS_PASSWORD.finditer(text):
                if not _is_kept_value(text, *match.span(2), True):
                    spans.append(match.span(2))
        if "dentified" in hay:
            identified = _IDENTIFIED_BY[0] if candidates is _ARG_CANDIDATE[0] else _IDENTIFIED_BY[1]
            for match in identified.finditer(hay):
                span = _value_span(text, match.end())
                if span is not None and not _is_kept_value(text, *span):
                    spans.append(span[:2])
        if not spans:
            return text
        text, replaced = _replace_spans(text, spans, self.marker)
        counts[self.name] += replaced
        return text

    @staticmethod
    def _named(
        text: str,
        hay: str,
        candidates: re.Pattern[str],
        extra_keys: frozenset[str],
        spans: list[tuple[int, int]],
    ) -> None:
        for match in candidates.finditer(hay):
            start = match.start()
            floor = max(0, start - 64)
            while start > floor and text[start - 1] in _IDENT:
                start -= 1
            if start > 0 and text[start - 1] in _IDENT:
                continue
            name = text[start : match.end(1)]
            quoted_only = False
            if name[:1] == "-":
                flag = name.lstrip("-")
                dashes = len(name) - len(flag)
                if dashes > 2 or not flag or flag[:3].lower() in ("no-", "no_"):
                    continue
                if dashes == 1 and not flag.islower():
                    continue  # -pMySecret is a short flag with its value (mysql's), not a name
                if start > 0 and text[start - 1] not in _ARG_BEFORE_FLAG:
                    continue
                if not (is_secret_key(flag, extra_keys) or flag.lower() in _ARG_SECRET_FLAGS):
                    continue
            else:
                if not is_secret_key(name, extra_keys):
                    continue
                # "config set NAME VALUE", "setx NAME VALUE", fish's "set -gx NAME VALUE";
                # otherwise only a quoted value.
                quoted_only = not (
                    _follows_word(hay, start, "set ")
                    or _follows_word(hay, start, "setx ")
                    or _SET_WITH_FLAGS.search(hay, max(0, start - 60), start) is not None
                )
            span = _value_span(text, match.end(), unquoted=not quoted_only)
            if span is None:
                continue
            value_start, value_end, quoted = span
            if not quoted and text[value_start] in _ARG_NOT_A_VALUE:
                continue
            if _is_kept_value(text, value_start, value_end, quoted):
                continue
            if not quoted and text[value_start:value_end].lower() in _ARG_PROSE_WORDS:
                continue
            spans.append((value_start, value_end))

    @staticmethod
    def _methods(text: str, hay: str, extra_keys: frozenset[str], spans: list[tuple[int, int]]) -> None:
        """A method named for a secret given it as its one literal argument: a builder's
        ``.password("x")``, ``.apiKey("x")``, a setter's ``.setClientSecret("x")``; not a
        getter's or a checker's (``.getSecret("db/creds")``, ``.verify_token("x")``)."""
        for call in _METHOD_CALL.finditer(hay):
            name = text[call.start(1) : call.end(1)]
            words = key_words(name)
            if words[:1] in (["set"], ["with"], ["use"]):
                words = words[1:]
            if not words or words[0] in _NOT_SETTER_VERBS or not is_secret_key("_".join(words), extra_keys):
                continue
            span = _value_span(text, call.end(), unquoted=False)
            if span is None:
                continue
            after = span[1]
            while after < len(text) and text[after] == "\\":
                after += 1
            after += 1  # the closing quote
            while after < len(text) and text[after] in " \t":
                after += 1
            if not text.startswith(")", after):
                continue  # a second argument: not the secret's one
            if not _is_kept_value(text, *span) and not _is_placeholder(text[span[0] : span[1]]):
                spans.append(span[:2])

    @staticmethod
    def _call_pairs(text: str, hay: str, extra_keys: frozenset[str], spans: list[tuple[int, int]]) -> None:
        """A secret's name and its value as a setter's two arguments
        (``props.setProperty("password", "x")``, ``os.Setenv("API_TOKEN", "x")``,
        ``env::set_var(…)``, ``localStorage.setItem(…)``), and a flag and its value in an
        argv written as JSON (``["--password", "x"]``)."""
        for pair in _CALL_PAIR.finditer(hay):
            name = text[pair.start(2) : pair.end(2)]
            if hay[pair.start()] == "(":
                callee = _CALLEE.search(hay, max(0, pair.start() - 40), pair.start())
                if callee is None or not callee.group().endswith(_SETTERS):
                    continue
            elif name[:1] != "-":
                continue  # ["password", "email"] is a list of names
            if not is_secret_key(name.lstrip("-"), extra_keys):
                continue
            comma = _CALL_PAIR_COMMA.match(text, pair.end())
            span = _value_span(text, comma.end() if comma else pair.end(), unquoted=False)
            if span is not None and not _is_kept_value(text, *span):
                spans.append(span[:2])

    @staticmethod
    def _tool(
        text: str,
        hay: str,
        tool: re.Pattern[str],
        flag: re.Pattern[str],
        shape: str,
        spans: list[tuple[int, int]],
    ) -> None:
        scanned = 0  # each stretch of text is searched for a line end and for flags once
        for command in tool.finditer(hay):
            begin = max(command.end(), scanned)
            limit = min(len(text), command.end() + MAX_COMMAND)
            end = _COMMAND_END.search(text, begin, limit)
            stop = end.start() if end is not None else limit
            scanned = max(scanned, stop)
            for option in flag.finditer(text, begin, stop):
                # An argv written as JSON: the flag's closing quote and a comma, then its value.
                item = _NEXT_ITEM.match(text, option.end())
                span = _value_span(text, option.end() if item is None else item.end())
                if span is None:
                    continue
                start, value_end, quoted = span
                if not quoted and text[start] in _ARG_NOT_A_VALUE:
                    continue
                if shape == "user:password":
                    colon = text.find(":", start, value_end)
                    if colon < 0:
                        continue  # no password: curl asks for it
                    start = colon + 1
                if (
                    value_end > start
                    and not _is_kept_value(text, start, value_end, True)
                    and not _is_placeholder(text[start:value_end])
                ):
                    spans.append((start, value_end))


class PositionalRule(_PairRule):
    """Secrets passed positionally (``_POSITIONAL``): the quotes around a quoted one stay."""

    name = "secret-argument"
    order = 4
    marker = MARKER.format(rule="secret-argument")

    def wants(self, text: str, lowered: str) -> bool:
        return any(literal in lowered for literals, _ in _POSITIONAL for literal in literals)

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        lowered = text.lower()
        spans: list[tuple[int, int]] = []
        for literals, pattern in _POSITIONAL:
            if any(literal in lowered for literal in literals):
                spans += [
                    match.span(pattern.groups)
                    for match in pattern.finditer(text)
                    if _is_a_literal_secret(match)
                    and not _is_kept_value(text, *match.span(pattern.groups), True)
                ]
        if not spans:
            return text
        text, replaced = _replace_spans(text, spans, self.marker)
        counts[self.name] += replaced
        return text


# A JSON Web Key's private members: RSA's d, p, q, dp, dq, qi (and oth), EC's and OKP's
# d, a symmetric key's k; in an object that has "kty" (the public members stay).
JWK_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "k", "oth"})
_JWK_MEMBER = re.compile(
    r"(?<=[{,\s])(\\{0,7}[\"'])(?:d|p|q|dp|dq|qi|k)\1[ \t]*:[ \t]*\\{0,7}[\"']([A-Za-z0-9_+/=\-]{1,20000})"
)
# The same members named without quotes (YAML, a JavaScript object): their value must be
# as long as a key's (16 characters or more), so "p: 3" near a "kty" stays.
_JWK_BARE_MEMBER = re.compile(
    r"(?:(?<=[{,\s])|(?<=\\n))(?:d|p|q|dp|dq|qi|k)[ \t]*:[ \t]*(\\{0,7}[\"']?)([A-Za-z0-9_+/=\-]{16,20000})"
)
# How far from its "kty" a member of the same key may stand (an RSA key of 4096 bits
# is about 3 KB of JSON).
_JWK_WINDOW = 16_384


class JwkRule:
    """The private members of JSON Web Keys written as text (also escaped inside a
    string, or as a Python repr). Each key's members are looked for between the braces
    around its "kty", and never past the previous or the next "kty", so every stretch of
    text is searched once however many keys it holds."""

    name = "jwk-private-key"
    literal = "kty"
    gate = ":"  # every member it replaces follows a ':' (one memchr before the word's search)
    marker = MARKER.format(rule="jwk-private-key")

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        places = []
        pos = text.find("kty")
        while pos >= 0:
            places.append(pos)
            pos = text.find("kty", pos + 3)
        spans: list[tuple[int, int]] = []
        for i, pos in enumerate(places):
            floor = max(places[i - 1] + 3 if i else 0, pos - _JWK_WINDOW)
            ceiling = min(places[i + 1] if i + 1 < len(places) else len(text), pos + _JWK_WINDOW)
            opening = text.rfind("{", floor, pos)
            closing = text.find("}", pos, ceiling)
            start = opening if opening >= 0 else floor
            end = closing if closing >= 0 else ceiling
            spans += [member.span(2) for member in _JWK_MEMBER.finditer(text, start, end)]
            spans += [member.span(2) for member in _JWK_BARE_MEMBER.finditer(text, start, end)]
        if not spans:
            return text
        text, replaced = _replace_spans(spans=spans, text=text, marker=self.marker)
        counts[self.name] += replaced
        return text


# A Markdown table's or a CSV's header row: cells that are names (short, a few words).
_TABLE_HINT = re.compile(_KV_HINTS)
_HEADER_CELL_MAX = 40
MAX_TABLE_ROWS = 10_000


class TableRule(_PairRule):
    """The cells under a secret-named column of a Markdown table or a CSV (comma,
    semicolon or tab separated): ``| user | password |`` then ``|---|---|`` then rows, or
    ``user,password`` then rows with as many cells. Cells that describe a secret
    (``required``, ``n/a``, empty) stay."""

    name = "table-cell"
    order = 5
    marker = MARKER.format(rule="table-cell")

    def wants(self, text: str, lowered: str) -> bool:
        return ("\n" in text or "\\n" in text) and (
            "|" in text or "," in text or "\t" in text or ";" in text or "\\t" in text
        )

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        # Lines end at a newline, or at "\n" inside a string; there a line also ends at
        # the string's closing quote (a CSV's own quotes are escaped: \").
        escaped = "\n" not in text
        eol = "\\n" if escaped else "\n"
        hay = _lowered(text)
        if len(hay) != len(text):
            hay = text
        spans: list[tuple[int, int]] = []
        done = 0
        for hint in _TABLE_HINT.finditer(hay):
            if hint.start() < done:
                continue
            line_start, line_end = _line_around(text, hint.start(), done, eol, escaped)
            done = line_end
            header = _cells(text, line_start, line_end, quote='\\"' if escaped else '"')
            if header is None:
                continue
            delimiter, cells = header
            names = [text[a:b] for a, b in cells]
            if delimiter == "|" and len(cells) >= 2 and _is_secret_column(names[0], extra_keys):
                value = _labelled_value(text, line_start, cells, eol, escaped)
                if value is not None:  # "| password | x |" under "| name | value |"
                    if not _is_kept_cell(text, *value):
                        spans.append(value)
                    continue
            if len(cells) < 2 or not all(_HEADER_NAME_CELL.fullmatch(n.strip("*_`")) for n in names):
                continue
            columns = [i for i, n in enumerate(names) if _is_secret_column(n, extra_keys)]
            # A table of names and values ("| name | value |" then "| password | x |"): the
            # value of a row whose name names a secret.
            labelled = _label_value_column(names)
            if not columns and labelled is None:
                continue
            if delimiter != "|" and _row_of_the_table_above(
                text, line_start, eol, delimiter, len(cells), escaped
            ):
                continue  # "name,type,description" then "password,string,…": a row, no header
            pos = line_end + len(eol)
            # A Markdown table needs its |---| line; "email|password" without spaces is a
            # pipe-separated file's header.
            header_line = text[line_start:line_end]
            first_pipe = header_line.find("|")
            pipes = (
                delimiter == "|"
                and not header_line.startswith("|")
                and not any(c in header_line[first_pipe:] for c in " \t")
            )
            if delimiter == "|":
                rule_end = _line_around(text, pos, pos, eol, escaped)[1] if pos < len(text) else pos
                if pos >= len(text):
                    continue
                if not _TABLE_RULE.fullmatch(text, pos, rule_end):
                    if not pipes:
                        continue
                    rule_end = line_end
                # Words before the header's first pipe ("see | user | password |") are no
                # column when the table's lines start with a pipe.
                if text[line_start:line_end].strip()[:1] != "|" and text[pos:rule_end].strip()[:1] == "|":
                    columns = [i - 1 for i in columns if i > 0]
                    cells = cells[1:]
                    labelled = None
                pos = rule_end + len(eol)
            for _ in range(MAX_TABLE_ROWS):
                if pos >= len(text) or not text.startswith(eol, pos - len(eol)):
                    break
                row_end = _line_around(text, pos, pos, eol, escaped)[1]
                row = _cells(text, pos, row_end, delimiter, quote='\\"' if escaped else '"')
                if row is None or len(row[1]) != len(cells):
                    break
                row_columns = columns
                if labelled is not None and _is_secret_column(text[slice(*row[1][0])], extra_keys):
                    row_columns = [*columns, labelled]
                for column in row_columns:
                    a, b = row[1][column]
                    if b > a and not _is_kept_cell(text, a, b):
                        spans.append((a, b))
                done = row_end
                pos = row_end + len(eol)
        if not spans:
            return text
        text, replaced = _replace_spans(text, spans, self.marker)
        counts[self.name] += replaced
        return text


_LABEL_HEADERS = _words("name key field setting variable var parameter param property env item")
_VALUE_HEADERS = _words("value val values secret contents")


MAX_LABEL_ROWS = 50


def _labelled_value(
    text: str, line_start: int, cells: list[tuple[int, int]], eol: str, escaped: bool
) -> tuple[int, int] | None:
    """The value cell of the row at ``line_start`` when its table's header (found above,
    over the |---| line and at most ``MAX_LABEL_ROWS`` rows) names things and values."""
    end = line_start
    for _ in range(MAX_LABEL_ROWS):
        if end < len(eol) or not text.startswith(eol, end - len(eol)):
            return None
        above_end = end - len(eol)
        above_start = _line_around(text, above_end, max(0, above_end - 4000), eol, escaped)[0]
        if _TABLE_RULE.fullmatch(text, above_start, above_end):
            if above_start < len(eol):
                return None
            header_end = above_start - len(eol)
            header_start = _line_around(text, header_end, max(0, header_end - 4000), eol, escaped)[0]
            header = _cells(text, header_start, header_end, "|")
            if header is None:
                return None
            names = [text[a:b] for a, b in header[1]]
            if len(names) == len(cells) + 1 and text[header_start:header_end].strip()[:1] != "|":
                names = names[1:]  # words before the header's first pipe ("see | name | value |")
            if len(names) != len(cells):
                return None
            column = _label_value_column(names)
            return None if column is None else cells[column]
        if text[above_start:above_end].strip()[:1] != "|":
            return None
        end = above_start
    return None


def _label_value_column(names: list[str]) -> int | None:
    """The value column of a table whose first column names things ("name", "key",
    "setting"…) and another holds their values ("value"), or None."""
    if len(names) < 2 or names[0].strip("*_` ").lower() not in _LABEL_HEADERS:
        return None
    for i, name in enumerate(names[1:], 1):
        if name.strip("*_` ").lower() in _VALUE_HEADERS:
            return i
    return None


def _row_of_the_table_above(
    text: str, line_start: int, eol: str, delimiter: str, width: int, escaped: bool
) -> bool:
    """Whether the line before ``line_start`` is a header of names with as many cells: then
    the line at ``line_start`` is a row of that table (a CSV that documents its fields,
    "name,type,description" then "password,string,The password"), not a header."""
    if line_start < len(eol) or not text.startswith(eol, line_start - len(eol)):
        return False
    above_end = line_start - len(eol)
    above_start = text.rfind(eol, max(0, above_end - 4 * _HEADER_CELL_MAX * width), above_end)
    if above_start < 0:
        if above_end > 4 * _HEADER_CELL_MAX * width:
            return False
        above_start = 0
    else:
        above_start += len(eol)
    above = _cells(text, above_start, above_end, delimiter, quote='\\"' if escaped else '"')
    if above is None or len(above[1]) != width:
        return False
    return all(_HEADER_NAME_CELL.fullmatch(text[a:b].strip("*_`")) for a, b in above[1])


# A header cell: a name of a few words ("password", "API Key", "db.password").
_HEADER_NAME_CELL = re.compile(r"[A-Za-z][A-Za-z0-9 _.\-]{0,39}")


def _line_around(text: str, pos: int, floor: int, eol: str, escaped: bool) -> tuple[int, int]:
    """The line of ``text`` that holds ``pos`` (not starting before ``floor``)."""
    start = text.rfind(eol, floor, pos)
    start = floor if start < 0 else start + len(eol)
    end = text.find(eol, pos)
    end = len(text) if end < 0 else end
    if escaped:
        quote = _unescaped_quote(text, start, pos, last=True)
        if quote >= 0:
            start = quote + 1
        quote = _unescaped_quote(text, pos, end)
        if quote >= 0:
            end = quote
    return start, end


def _unescaped_quote(text: str, start: int, end: int, last: bool = False) -> int:
    """The first (or last) '"' in ``text[start:end]`` that no backslash escapes, or -1."""
    find = text.rfind if last else text.find
    pos = find('"', start, end)
    while pos >= 0 and pos > 0 and text[pos - 1] == "\\":
        pos = text.rfind('"', start, pos) if last else text.find('"', pos + 1, end)
    return pos


def _is_kept_cell(text: str, start: int, end: int) -> bool:
    """A cell that holds a marker, says no value is there ("n/a", "(not set)", "—"), or a
    word that describes a secret."""
    if text.find(_MARKER_START, start, end) >= 0:
        return True
    cell = text[start:end].strip("()[]*_` ").lower()
    return (
        cell in _KV_NOT_SECRET_VALUES
        or cell.startswith("not ")
        or cell in ("", "-", "—", "–", "...", "…", "?")
    )


_TABLE_RULE = re.compile(
    r"[ \t]{0,3}\|?(?:[ \t]{0,8}:?-{1,200}:?[ \t]{0,8}\|){1,100}(?:[ \t]{0,8}:?-{1,200}:?[ \t]{0,8})?"
)


def _cells(
    text: str, start: int, end: int, delimiter: str | None = None, quote: str = '"'
) -> tuple[str, list[tuple[int, int]]] | None:
    """The cells of the line ``text[start:end]`` as spans (without their spaces and
    quotes), split at ``delimiter`` or at the first of | , ; and tab the line holds."""
    line = text[start:end]
    if delimiter is None:
        stripped = line.strip()
        if stripped.startswith("|"):
            delimiter = "|"
        else:
            found = [d for d in (",", "\t", "\\t", ";", "|") if d in line]
            if not found:
                return None
            delimiter = found[0]
    cells = []
    pos = start
    if delimiter == "|":
        first = text.find("|", start, end)
        if first < 0:
            return None
        if not text[start:first].strip():
            pos = first + 1
    while pos <= end:
        a = pos
        while a < end and text[a] in " \t":
            a += 1
        if delimiter != "|" and text.startswith(quote, a):  # a quoted CSV cell
            close = text.find(quote, a + len(quote), end)
            while close >= 0 and text.startswith(quote + quote, close):
                close = text.find(quote, close + 2 * len(quote), end)
            if close < 0:
                return None
            cells.append((a + len(quote), close))
            following = text.find(delimiter, close, end)
            pos = (following if following >= 0 else end) + len(delimiter)
            continue
        following = text.find(delimiter, pos, end)
        b = following if following >= 0 else end
        c = b
        while c > a and text[c - 1] in " \t\r":
            c -= 1
        if c - 2 >= a and text.startswith("\\r", c - 2):  # a CRLF line end inside a string
            c -= 2
        cells.append((a, c))
        pos = b + len(delimiter)
    if delimiter == "|" and cells and cells[-1][0] >= cells[-1][1]:
        cells.pop()  # the closing pipe
    return delimiter, cells


def _is_secret_column(cell: str, extra_keys: frozenset[str]) -> bool:
    name = cell.strip("*_`'\" ")
    return 0 < len(name) <= _HEADER_CELL_MAX and len(name.split()) <= 3 and is_secret_key(name, extra_keys)


# An HTTP client's basic auth: requests' auth=("user", "pw"), HTTPBasicAuth("user", "pw"),
# httpx.BasicAuth(…), aiohttp.BasicAuth(login=…, password=…); the password is group 3.
_BASIC_AUTH_CALL = re.compile(
    r"(?<![A-Za-z0-9_])(?:(?:HTTP|Basic|Digest|HTTPBasic|HTTPDigest|Proxy)?Auth|auth[ \t]?=[ \t]?)\("
    r"[ \t]{0,8}(?:login[ \t]*=[ \t]*)?"
    r"(\\{0,7}[\"'])[^\"'\r\n\\]{0,256}\1[ \t]{0,8},[ \t]{0,8}(?:password[ \t]*=[ \t]*)?(\\{0,7}[\"'])"
    r"([^\"'\r\n\\]{1,256})\2"
)


def _is_url_password(match: re.Match[str]) -> bool:
    """A URL's password, unless documentation's placeholder stands there
    (postgres://user:password@localhost, https://u:<token>@host)."""
    password = match.group(1)
    return not (
        password.lower() in _URL_PLACEHOLDERS or _is_placeholder(password) or _is_placeholder_value(password)
    )


# An argument before a positional secret: a literal or a name (a variable, a field).
_POSITIONAL_ARG = r"(?:\\{0,7}\"[^\"\r\n\\]{0,300}\\{0,7}\"|\\{0,7}'[^'\r\n\\]{0,300}\\{0,7}'|[A-Za-z_$][A-Za-z0-9_.$]{0,100})"
# A positional secret: quoted (spaces allowed, the quotes stay) or one word.
_POSITIONAL_VALUE = (
    r"\\{0,7}[\"']?((?<=[\"'])[^\"'\r\n\\]{1,256}(?=\\{0,7}[\"'])|(?<![\"'])[^\s\"'\\;|)]{1,256})"
)


def _is_a_literal_secret(match: re.Match[str]) -> bool:
    """A positional argument that is a secret's value, not a variable, a placeholder or
    a path ($pw, ${PW}, <password>, ./pw.txt)."""
    value = match.group(match.re.groups)
    return not (
        value[:1] in "$%(-{"
        or _is_placeholder(value)
        or _is_placeholder_value(value)
        or value.startswith(("./", "../", "~/", "/"))
        or value.lower() in _KV_NOT_SECRET_VALUES
    )


# Positional secrets: the tool or the function names what its argument is. Each entry's
# literals (lower-cased) are looked for first; group 1 (the last group) is the secret.
# new ClientSecretCredential(tenant, id, "x"), NetworkCredential("u", "x"),
# AzureKeyCredential("x") (a credential class's last argument, when a literal); JDBC's
# DriverManager.getConnection(url, user, "x"); PowerShell's ConvertTo-SecureString 'x'
# -AsPlainText; htpasswd -b[c] file user x, htpasswd -nb user x; rabbitmqctl add_user name
# x (change_password); sqlcmd -S db -U sa -P x (bcp, osql, isql); gh secret set NAME
# --body x; dotnet user-secrets set "Name" x; vercel env add NAME <env> <<< x.
_POSITIONAL: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    (
        ("credential",),
        re.compile(
            r"(?<![A-Za-z0-9_])[A-Z][A-Za-z0-9]{0,60}Credentials?[ \t]{0,8}\("
            rf"(?:[ \t]{{0,8}}{_POSITIONAL_ARG}[ \t]{{0,8}},){{0,4}}[ \t]{{0,8}}"
            r"(\\{0,7}[\"'])([^\"'\r\n\\]{1,256})\1[ \t]{0,8}\)"
        ),
    ),
    (
        ("getconnection",),
        re.compile(
            rf"getConnection[ \t]{{0,8}}\([ \t]{{0,8}}{_POSITIONAL_ARG}[ \t]{{0,8}},[ \t]{{0,8}}{_POSITIONAL_ARG}"
            r"[ \t]{0,8},[ \t]{0,8}(\\{0,7}[\"'])([^\"'\r\n\\]{1,256})\1"
        ),
    ),
    (
        ("convertto-securestring",),
        re.compile(r"(?i)ConvertTo-SecureString[ \t]{1,8}(?:-String[ \t]{1,8})?" + _POSITIONAL_VALUE),
    ),
    (
        ("htpasswd",),
        re.compile(
            r"(?<![A-Za-z0-9_\-])htpasswd(?:\.exe)?[ \t]{1,8}-(?=[A-Za-z]{0,7}b)"
            r"(?:(?=[A-Za-z]{0,7}n)[A-Za-z]{1,8}[ \t]{1,8}[^\s\"']{1,256}"
            r"|(?![A-Za-z]{0,7}n)[A-Za-z]{1,8}[ \t]{1,8}[^\s\"']{1,256}[ \t]{1,8}[^\s\"']{1,256})"
            r"[ \t]{1,8}" + _POSITIONAL_VALUE
        ),
    ),
    (
        ("rabbitmqctl",),
        re.compile(
            r"(?<![A-Za-z0-9_\-])rabbitmqctl(?:\.bat)?[^\r\n|;&]{0,200}?[ \t](?:add_user|change_password)"
            r"[ \t]{1,8}[^\s\"']{1,256}[ \t]{1,8}" + _POSITIONAL_VALUE
        ),
    ),
    (
        ("sqlcmd", "bcp", "osql", "isql"),
        re.compile(
            r"(?<![A-Za-z0-9_\-])(?:sqlcmd|bcp|osql|isql)(?:\.exe)?(?=[ \t])[^\r\n|;&]{0,300}?[ \t]-P[ \t]{1,8}"
            + _POSITIONAL_VALUE
        ),
    ),
    (
        ("secret set",),
        re.compile(
            r"(?<![A-Za-z0-9_\-])secret[ \t]{1,8}set[^\r\n|;&]{0,200}?[ \t](?:-b|--body)(?:[ \t]{1,8}|=)"
            + _POSITIONAL_VALUE
        ),
    ),
    (
        ("user-secrets",),
        re.compile(
            r"user-secrets[ \t]{1,8}set[ \t]{1,8}(?:\"[^\"\r\n]{1,200}\"|'[^'\r\n]{1,200}'|[^\s\"']{1,200})[ \t]{1,8}"
            + _POSITIONAL_VALUE
        ),
    ),
    (
        ("env add",),
        re.compile(
            r"(?<![A-Za-z0-9_\-])env[ \t]{1,8}add[ \t]{1,8}[^\r\n|;&<]{1,200}<<<[ \t]{0,8}"
            + _POSITIONAL_VALUE
        ),
    ),
)


_URL_PLACEHOLDERS = _words("password pass passwd pwd pw secret changeme yourpassword mypassword")
# A sentence that gives a secret: "my password is x", "The API key for prod is x", "the
# root password is `x`". The value must read as one (8 characters or more with a letter
# and a digit), so "the password is required" or "the secret is salted water" stay prose.
_SECRET_IN_PROSE = re.compile(
    r"(?i)(?<![a-z0-9_\-])(?:password|passwd|passphrase|secret"
    r"|(?:api|secret|access|private|license|licence|signing|encryption)[ _\-]?key"
    r"|(?:api|access|auth|bot|refresh|bearer|personal[ \t]access|github|slack|npm)[ _\-]?token)"
    r"(?:[ \t]{1,4}(?:for|of|on|to)[ \t]{1,4}[a-z0-9_.\-]{1,40}(?:[ \t]{1,4}[a-z0-9_.\-]{1,40})?)?"
    r"[ \t]{1,4}(?:is|was)[ \t]{0,4}:?[ \t]{1,4}`?"
    r"(?=[^\s\"'`]{0,256}[0-9])(?=[^\s\"'`]{0,256}[a-z])(?![$<{%(\[])"
    r"([^\s\"'`]{7,255}[^\s\"'`.,;:?)])"
)


class ProseRule(_PairRule):
    """A secret given in a sentence, after "is" or "was" (the pair stage's hint words and
    its " is " and " was " gates find the sentences that may hold one)."""

    name = "secret-in-prose"
    order = 6
    marker = MARKER.format(rule="secret-in-prose")

    def wants(self, text: str, lowered: str) -> bool:
        return " is " in lowered or " was " in lowered or "\tis " in lowered

    def apply(self, text: str, counts: Counter[str], extra_keys: frozenset[str]) -> str:
        spans = [
            match.span(1)
            for match in _SECRET_IN_PROSE.finditer(text)
            if _is_a_literal_secret(match) and not _is_kept_value(text, *match.span(1), True)
        ]
        if not spans:
            return text
        text, replaced = _replace_spans(text, spans, self.marker)
        counts[self.name] += replaced
        return text


_B = r"(?<![A-Za-z0-9_\-])"  # a left boundary that also treats '-' and '_' as word parts

DEFAULT_VALUE_RULES: tuple[ValueRule, ...] = (
    ValueRule("anthropic", "sk-ant-", re.compile(_B + r"sk-ant-[A-Za-z0-9_\-]{20,400}")),
    ValueRule(
        "openai",
        "sk-",
        # After '_' too: an identifier that glues a key on ("call_sk-proj-…") still holds it.
        re.compile(r"(?<![A-Za-z0-9\-])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,400}"),
    ),
    ValueRule(
        "stripe",
        ("sk_", "rk_", "whsec_"),
        # Secret and restricted keys; webhook signing secrets (whsec_, also Svix's).
        re.compile(_B + r"(?:[sr]k_(?:live|test)_[A-Za-z0-9]{10,200}|whsec_[A-Za-z0-9+/=]{20,200})"),
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
    # Access tokens, OAuth client secrets, refresh tokens.
    ValueRule(
        "google-oauth",
        ("ya29.", "GOCSPX-", "1//0"),
        re.compile(
            _B
            + r"(?:ya29\.[0-9A-Za-z_\-]{20,2000}|GOCSPX-[0-9A-Za-z_\-]{20,100}|1//0[0-9A-Za-z_\-]{30,1000})"
        ),
    ),
    ValueRule(
        "slack",
        ("xox", "xapp-"),
        re.compile(_B + r"(?:xox[abposre]|xapp)-[0-9A-Za-z\-]{10,300}"),
    ),
    ValueRule("huggingface", "hf_", re.compile(_B + r"hf_[A-Za-z0-9]{30,100}")),
    # GitLab: personal, deploy, runner, pipeline-trigger, CI-job, incoming-mail, feed,
    # OAuth-application, agent and feature-flag tokens (the literal prefix comes first so
    # the search skips to each "gl"; the boundary is checked behind it).
    ValueRule(
        "gitlab",
        "gl",
        gate="-",
        pattern=re.compile(
            r"gl(?<![A-Za-z0-9_\-]gl)(?:pat|dt|rt|ptt|cbt|imt|ft|soat|oas|agent|ffct|wt)-[A-Za-z0-9_\-]{20,300}"
            r"(?:\.[A-Za-z0-9_\-]{1,40}){0,3}"
        ),
    ),
    # Grafana service-account and Cloud tokens.
    ValueRule(
        "grafana",
        "gl",
        gate="_",
        pattern=re.compile(
            r"gl(?<![A-Za-z0-9_\-]gl)(?:sa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|c_[A-Za-z0-9+/]{32,400}={0,2})"
        ),
    ),
    ValueRule("npm", "npm_", re.compile(_B + r"npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])")),
    ValueRule("pypi", "pypi-AgE", re.compile(_B + r"pypi-AgE[A-Za-z0-9_\-]{50,2000}")),
    ValueRule("docker", "dckr_", re.compile(_B + r"dckr_(?:pat|oat)_[A-Za-z0-9_\-]{20,200}")),
    ValueRule("digitalocean", "_v1_", re.compile(_B + r"do[opr]_v1_[a-f0-9]{64}(?![a-f0-9])")),
    # Service, batch and recovery tokens.
    ValueRule("vault", ("hvs.", "hvb.", "hvr."), re.compile(_B + r"hv[sbr]\.[A-Za-z0-9_\-]{24,500}")),
    ValueRule(
        "databricks", "dapi", re.compile(_B + r"dapi[a-f0-9]{32}(?:-[0-9]{1,2})?(?![A-Za-z0-9])"), long=True
    ),
    ValueRule("sendgrid", "SG.", re.compile(_B + r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,64}")),
    # Incoming-webhook URLs carry their secret in the path (JSON may escape the '/').
    ValueRule(
        "webhook-url",
        "hooks.slack",
        gate="/",
        pattern=re.compile(
            r"hooks\.slack\.com\\{0,4}/(?:services|workflows|triggers)\\{0,4}/((?:[A-Za-z0-9_\-]|\\{0,4}/){8,300})"
        ),
        group=1,
    ),
    ValueRule(
        "webhook-url",
        "webhook",
        gate="/",
        pattern=re.compile(
            r"discord(?:app)?\.com\\?/api\\?/webhooks\\?/([0-9]{5,30}\\?/[A-Za-z0-9_\-]{20,200})"
        ),
        group=1,
    ),
    ValueRule(
        "webhook-url",
        "webhook",
        gate="/",
        pattern=re.compile(r"webhook\.office\.com\\?/webhookb2\\?/((?:[A-Za-z0-9@_\-]|\\?/){20,400})"),
        group=1,
    ),
    ValueRule(
        "age-secret-key",
        "AGE-",
        re.compile(
            _B + r"(?:AGE-SECRET-KEY-(?:PQ-)?1[0-9A-Z]{50,3000}|AGE-PLUGIN-[A-Z0-9]{1,40}-1[0-9A-Z]{20,3000})"
        ),
    ),
    ValueRule(
        "telegram-bot-token",
        ":AA",
        re.compile(r"(?<![0-9])[0-9]{6,12}:AA[A-Za-z0-9_\-]{30,40}(?![A-Za-z0-9_\-])"),
    ),
    # Azure shared access signatures: the sig= of a SAS URL or token (the other fields only
    # scope it); S3 and GCS presigned URLs' signatures.
    ValueRule(
        "azure-sas",
        "sig=",
        re.compile(r"(?<![A-Za-z0-9_\-])sig=([A-Za-z0-9%+/=_\-]{16,400})"),
        group=1,
    ),
    ValueRule(
        "presigned-url",
        "ignature=",
        gate="=",
        pattern=re.compile(r"(?i)(?<![a-z0-9_\-])x-(?:amz|goog)-signature=([0-9a-f]{32,1024})"),
        group=1,
    ),
    # AI providers with their own prefixes (OpenRouter's sk-or-, DeepSeek's sk- and
    # Langfuse's sk-lf- are the openai rule's).
    ValueRule("groq", "gsk_", re.compile(_B + r"gsk_[A-Za-z0-9]{40,100}")),
    ValueRule("xai", "xai-", re.compile(_B + r"xai-[A-Za-z0-9]{60,120}")),
    ValueRule("perplexity", "pplx-", re.compile(_B + r"pplx-[A-Za-z0-9]{40,100}")),
    ValueRule("tavily", "tvly-", re.compile(_B + r"tvly-(?:dev-|prod-)?[A-Za-z0-9]{20,100}")),
    ValueRule("replicate", "r8_", re.compile(_B + r"r8_[A-Za-z0-9]{30,60}")),
    ValueRule("langsmith", "lsv2_", re.compile(_B + r"lsv2_(?:pt|sk)_[A-Za-z0-9_]{30,120}")),
    ValueRule("pinecone", "pcsk_", re.compile(_B + r"pcsk_[A-Za-z0-9_]{40,200}")),
    # Shapes of gitleaks' and trufflehog's rule sets with a prefix of their own (the
    # prefix is what keeps them cheap and free of false positives).
    *(
        ValueRule(name, literal, re.compile(_B + pattern), long=True)
        for name, literal, pattern in (
            ("linear", "lin_api_", r"lin_api_[A-Za-z0-9]{40}(?![A-Za-z0-9])"),
            ("postman", "PMAK-", r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),
            ("shopify", ("shpat_", "shpca_", "shppa_", "shpss_"), r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
            ("sentry", ("sntrys_", "sntryu_"), r"sntry[su]_[A-Za-z0-9+/=_]{40,400}"),
            ("planetscale", "pscale_", r"pscale_(?:tkn|pw|oauth)_[A-Za-z0-9=_.\-]{32,64}"),
            ("doppler", "dp.", r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}"),
            ("new-relic", "NR", r"NR(?:AK|AA|II|JS)-[A-Za-z0-9]{19,32}"),
            ("heroku", "HRKU-", r"HRKU-[A-Za-z0-9_\-]{50,80}"),
            ("atlassian", "ATATT3", r"ATATT3[A-Za-z0-9_\-=]{60,250}"),
            ("brevo", "xkeysib-", r"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}"),
            ("prefect", "pnu_", r"pnu_[A-Za-z0-9]{36}"),
            ("pulumi", "pul-", r"pul-[a-f0-9]{40}"),
            ("readme", "rdme_", r"rdme_[a-z0-9]{70}"),
            ("rubygems", "rubygems_", r"rubygems_[a-f0-9]{48}"),
            ("typeform", "tfp_", r"tfp_[A-Za-z0-9_.=\-]{40,80}"),
            ("dynatrace", "dt0c01.", r"dt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}"),
            ("easypost", "EZ", r"EZ[AT]K[A-Za-z0-9]{54}"),
            ("flutterwave", "FLWSECK", r"FLWSECK(?:_TEST)?-[a-h0-9]{32}-X"),
            ("duffel", "duffel_", r"duffel_(?:test|live)_[A-Za-z0-9_=\-]{43}"),
            ("frameio", "fio-u-", r"fio-u-[A-Za-z0-9_=\-]{64}"),
            ("terraform-cloud", ".atlasv1.", r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70}"),
            ("alibaba", "LTAI", r"LTAI[A-Za-z0-9]{20}(?![A-Za-z0-9])"),
            ("azure-ad-client-secret", "Q~", r"[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34}"),
            ("square", "sq0", r"sq0(?:atp|csp)-[0-9A-Za-z_\-]{22,43}"),
            ("mapbox", "sk.eyJ", r"sk\.eyJ[A-Za-z0-9_\-]{20,400}\.[A-Za-z0-9_\-]{20,100}"),
            ("openshift", "sha256~", r"sha256~[A-Za-z0-9_\-]{43}"),
            ("onepassword", "ops_eyJ", r"ops_eyJ[A-Za-z0-9+/=]{100,2000}"),
            ("facebook", "EAA", r"EAA[A-Za-z0-9]{100,500}"),
            ("flyio", "fo1_", r"fo1_[A-Za-z0-9_\-]{43}"),
            ("netlify", "nfp_", r"nfp_[A-Za-z0-9]{36}"),
            ("render", "rnd_", r"rnd_[A-Za-z0-9]{32}"),
            ("supabase", "sbp_", r"sbp_[a-f0-9]{40}"),
            (
                "notion",
                ("ntn_", "secret_"),
                r"(?:ntn_[A-Za-z0-9]{40,60}(?![A-Za-z0-9])|secret_[A-Za-z0-9]{43}(?![A-Za-z0-9]))",
            ),
            ("mailgun", "key-", r"key-[0-9a-f]{32}(?![A-Za-z0-9])"),
        )
    ),
    # A Twilio API key's SID (its secret has no shape of its own), behind the "K" gate.
    ValueRule("twilio", "SK", re.compile(_B + r"SK[0-9a-f]{32}(?![A-Za-z0-9_\-])"), long=True, gate="K"),
    # A Discord bot token: the bot's id in base64 (a number: "MT…" to "OT…"), a timestamp
    # and an HMAC, joined by dots.
    ValueRule(
        "discord",
        # The ids of bots made since 2022 start with "1" ("MT" in base64); older ones (17
        # or 18 digits) are the key-value rule's (DISCORD_TOKEN=…): nine literals cost
        # every long string nine searches.
        "MT",
        re.compile(
            _B
            + r"(?:M[TjzDk]|N[DTjz]|O[DT])[A-Za-z0-9_\-]{21,30}\.[A-Za-z0-9_\-]{6,7}\.[A-Za-z0-9_\-]{27,45}"
            r"(?![A-Za-z0-9_\-])"
        ),
        long=True,
        gate=".",
    ),
    # A Sentry DSN's key (https://<32 hex>@o123.ingest.sentry.io/…): the key authenticates
    # what is sent, the host and the project stay.
    ValueRule(
        "sentry",
        "sentry",
        re.compile(r"://([0-9a-f]{32})(?::[0-9a-f]{32})?@[A-Za-z0-9.\-]{0,200}sentry"),
        group=1,
        gate="://",
    ),
    # Two more from gitleaks, gated by a capital letter prose rarely holds.
    ValueRule(
        "artifactory", "AKCp", re.compile(_B + r"AKCp[A-Za-z0-9]{69}(?![A-Za-z0-9])"), long=True, gate="K"
    ),
    ValueRule(
        "clojars", "CLOJARS_", re.compile(_B + r"CLOJARS_[A-Za-z0-9]{60}(?![A-Za-z0-9])"), long=True, gate="J"
    ),
    # Its literal holds no punctuation to test first; every match holds a '.'.
    ValueRule("airtable", "pat", re.compile(_B + r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}"), long=True, gate="."),
    # A private key in base64 (a kubeconfig's client-key-data, a Kubernetes Secret's
    # tls.key): "LS0tLS1CRUdJTi" is "-----BEGIN" encoded. Certificates encode alike, so
    # the start is decoded: only a PRIVATE KEY goes.
    ValueRule(
        "base64-private-key",
        "LS0tLS1CRUdJTi",
        # A YAML block (``tls.key: |``) wraps it over indented lines: each further line is
        # base64 and nothing else up to its end.
        re.compile(
            r"(?<![A-Za-z0-9+/=])LS0tLS1CRUdJTi[A-Za-z0-9+/]{0,20000}+"
            r"(?:(?:\r?\n|\\{1,4}n)[ \t]{0,64}[A-Za-z0-9+/]{4,20000}+"
            r"(?=={0,2}[ \t]{0,64}(?:[\r\n\"']|\\{1,4}[nr\"]|\Z))){0,400}={0,2}"
        ),
        check=_is_encoded_private_key,
        long=True,
    ),
    # A Netscape cookies.txt line (curl, wget, yt-dlp, browser exports): domain, flag,
    # path, secure, expiry, name, value; tab-separated, or "\t" inside a JSON string.
    ValueRule(
        "cookie-file",
        ("TRUE\t", "FALSE\t", "TRUE\\", "FALSE\\"),
        re.compile(
            r"(?:(?<![^\s\"'])|(?<=\\n))(?:#HttpOnly_)?[A-Za-z0-9._\-]{1,253}(\t|\\{1,4}t)(?:TRUE|FALSE)\1"
            r"[^\t\r\n\\]{1,1000}\1(?:TRUE|FALSE)\1[0-9]{1,20}\1[^\t\r\n\\]{0,1000}\1"
            r"\"?([^\t\r\n\\\"]{1,4000})"
        ),
        group=2,
    ),
    # The same line with spaces for tabs (as a terminal or a chat shows it): the path
    # starts with '/', the expiry is a number.
    ValueRule(
        "cookie-file",
        (" TRUE ", " FALSE "),
        gate="E",
        pattern=re.compile(
            r"(?<![^\s\"'])(?:#HttpOnly_)?[A-Za-z0-9._\-]{1,253} {1,8}(?:TRUE|FALSE) {1,8}/[^\s\\]{0,1000}"
            r" {1,8}(?:TRUE|FALSE) {1,8}[0-9]{1,20} {1,8}[^\s\\]{1,1000} {1,8}([^\s\\\"]{1,4000})"
        ),
        group=1,
    ),
    # Passwords a tool takes in its own way: "echo <password> | docker login
    # --password-stdin", and the user and password pair of an HTTP client's basic auth
    # (Python's requests, httpx, aiohttp), gated by a character their literals hold that
    # already gates other rules.
    ValueRule(
        "secret-argument",
        "password-stdin",
        pattern=re.compile(
            r"(?<![A-Za-z0-9_\-])echo[ \t]{1,8}(?:-[a-z]{1,3}[ \t]{1,8})?(\\{0,7}[\"']?)(?![-$<`(])"
            r"([^\s|\"';&\\]{1,256})\1"
            r"[ \t]{0,8}\|[^|\r\n\\]{0,200}?--password-stdin"
        ),
        group=2,
    ),
    ValueRule("secret-argument", "Auth(", _BASIC_AUTH_CALL, group=3, gate="A"),
    # Go's MySQL driver: "user:x@tcp(host:3306)/db".
    ValueRule(
        "url-credentials",
        ("@tcp(", "@unix(", "@udp("),
        re.compile(r"(?<![A-Za-z0-9_.\-])[A-Za-z0-9_.\-]{1,64}:([^\s\"'@/]{1,256})@(?:tcp|unix|udp)\("),
        group=1,
        check=_is_url_password,
        gate=":",
    ),
    ValueRule("secret-argument", ("auth=(", "auth = ("), _BASIC_AUTH_CALL, group=3, gate="="),
    # .netrc: "machine host login user password secret" (one line or several), and
    # "default login … password …". The fields before "password" are up to eight words.
    ValueRule(
        "netrc",
        "passw",  # every match holds password or passwd
        re.compile(
            r"(?<![A-Za-z0-9_\-])(?:machine|default)(?=[ \t])"
            r"(?:(?:[ \t\r\n]|\\{1,4}[nrt]){1,64}(?!password(?![^\s\\]))[^\s\\]{1,256}){0,8}"
            # A quoted password may hold spaces ("a b"); its quotes stay.
            r"(?:[ \t\r\n]|\\{1,4}[nrt]){1,64}(?:password|passwd)(?:[ \t]|\\{1,4}t){1,64}\"?"
            r"((?<=\")[^\"\r\n\\]{1,1000}(?=\")|(?<!\")[^\s\\\"]{1,1000})"
        ),
        group=1,
    ),
    # The same "password <value>" anywhere, when the value is shaped like one: letters and
    # digits in one word ("password hunter2"); "password reset" or "password manager" is
    # prose and stays, as does a flag's "--password x" (the argument rule's).
    ValueRule(
        "netrc",
        "passw",
        re.compile(
            r"(?<![A-Za-z0-9_\-])(?:password|passwd)[ \t]{1,8}"
            r"(?=[^\s\"'`,;)\]}\\]{0,256}[0-9])(?=[^\s\"'`,;)\]}\\]{0,256}[A-Za-z])"
            r"(?![A-Za-z_][A-Za-z0-9_]{0,200}[(.\[])"
            r"([^\s\"'`,;)\]}\\<>(\[{$]{4,256})(?![^\s\"'`,;)\]}\\])"
        ),
        group=1,
    ),
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
    FoldedValueRule(
        "bearer",
        "bearer",
        # The token stops at a quote, a bracket, a pipe or a comma: "Bearer x"}} and
        # -H 'Authorization: Bearer x' keep what closes them.
        # A closing mark followed by a letter or a digit is the token's own ("abc)def").
        re.compile(
            r"(?i)(bearer)((?:\s|\\{1,4}(?:u00[aA]0|t))+)"
            r"([^\s\"'`<>(){}\[\]|,;\\](?:[^\s\"'`<>(){}\[\]|,;\\]|[\"'`<>(){}\[\]|,;](?=[A-Za-z0-9]))*+)"
        ),
        group=3,
        check=_is_bearer_token,
    ),
    # The value shapes autourgos-history 2.2.9 redacts, in any case, at their shortest (a
    # short sk- key, any ya29. token, a three-part eyJ… token), glued to what precedes
    # them too: nothing it redacts passes through ours. One exception, its false
    # positive: "sk-" after a letter ("task-abcdefg", "desk-…") is a word, not a key.
    # Each unbounded run is possessive and nothing after it could take back what it ran
    # over, so a failed match ends at the first character that is not the run's.
    *(
        FoldedValueRule("autourgos-shape", literal, re.compile("(?i)" + pattern))
        for literal, pattern in (
            ("sk-", r"(?<![a-z])sk-[a-z0-9]{6}[a-z0-9]*+"),
            ("akia", r"akia[a-z0-9]{12}[a-z0-9]*+"),
            ("ghp_", r"ghp_[a-z0-9]{6}[a-z0-9]*+"),
            ("ya29.", r"ya29\.[a-z0-9_\-]++"),
            ("xox", r"xox[baprs]-[a-z0-9\-]{6}[a-z0-9\-]*+"),
            # The package's eyj[...]+\.[...]+\.[...]+ tried every "eyJ" of a run and ran
            # to the run's end each time (quadratic on "eyJ" * 20000). Here a run is tried
            # once, from its start, when it holds "eyj": the whole token goes, including
            # what was glued before "eyj".
            (
                "eyj",
                r"(?<![a-z0-9_\-])(?=[a-z0-9_\-]*?eyj[a-z0-9_\-])"
                r"[a-z0-9_\-]++\.[a-z0-9_\-]++\.[a-z0-9_\-]++",
            ),
        )
    ),
    ValueRule(
        "url-credentials",
        "://",
        # scheme://user:password@host, any scheme. The password may hold '@' and '/': it
        # runs to the last '@' followed by a host before a space, a quote or the next
        # "://" (an '@' later in the path widens the redaction rather than leaking part of
        # the password). "host:8080/path@x" is a port and a path, not a password.
        re.compile(
            r"://[^\s:/?#\"]{0,256}:(?![0-9]{1,5}(?:[/?#\s\"]|\Z))((?:[^\s\":]|:(?!//)){1,256})@"
            r"(?=[A-Za-z0-9._~%\-]{1,256}(?![A-Za-z0-9._~%\-@])|\[[0-9A-Za-z:.%]{2,100}\])"
        ),
        group=1,
        check=_is_url_password,
    ),
    # The same URL as JSON may write it, each '/' escaped ("https:\\/\\/user:pw@host").
    ValueRule(
        "url-credentials",
        "\\/",
        gate="\\",
        pattern=re.compile(
            r":\\{1,4}/\\{1,4}/[^\s:/?#\"\\]{0,256}:(?![0-9]{1,5}(?:\\{1,4}/|[?#\s\"\\]|\Z))"
            r"((?:[^\s\":\\]|\\{1,4}/){1,256})@"
            r"(?=[A-Za-z0-9._~%\-]{1,256}(?![A-Za-z0-9._~%\-@])|\[[0-9A-Za-z:.%]{2,100}\])"
        ),
        group=1,
    ),
    ValueRule(
        "url-credentials",
        ("%3A%2F%2F", "%3a%2f%2f"),
        # A whole URL percent-encoded inside another (?next=postgres%3A%2F%2Fu%3Apw%40host):
        # the password runs from the encoded ':' after the user to the first encoded '@'
        # (a port followed by a path is no password here either). Neither part runs over
        # the next encoded "://", so each is scanned up to the next URL at most.
        re.compile(
            r"(?i)%3A%2F%2F(?:[A-Za-z0-9._~!$'()*+,;=\-]|%(?!3A|40|2F)[0-9A-F]{2}){0,256}%3A"
            r"(?![0-9]{1,5}(?:%2F|%3F|%23|[&\s\"]|\Z))"
            r"((?:[A-Za-z0-9._~!$'()*+,;=\-]|%(?!40|3A%2F%2F)[0-9A-F]{2}){1,256})%40(?=[A-Za-z0-9\-]|%5B)"
        ),
        group=1,
        gate="%",
    ),
)


Rule = ValueRule | BlockRule | JwkRule | _PairRule
DEFAULT_RULES: tuple[Rule, ...] = (
    *PRIVATE_KEY_BLOCKS,
    *DEFAULT_VALUE_RULES,
    JwkRule(),
    HeaderRule(),
    KeyValueRule(),
    NameValueRule(),
    XmlRule(),
    ArgumentRule(),
    PositionalRule(),
    TableRule(),
    ProseRule(),
)


# A run of 20 token characters, tried once from each run's start.
_LONG_RUN = re.compile(r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{20}")


def _gate(literal: str) -> str:
    for gate in ("://", "-", "_", ".", "=", ":", "/", "\t", "\\"):
        if gate in literal:
            return gate
    if literal[:1] == "A" and literal.isupper():
        return "A"
    return literal


def _long_gate(literal: str) -> str:
    """The gate of a long token's literal: a single character where it can (a character is
    found by ``memchr``, a word by a slower search), preferring the ones prose rarely
    holds: a punctuation mark, then a capital letter or a digit."""
    for gate in ("_", "-", ".", "~"):
        if gate in literal:
            return gate
    for char in literal:
        if char.isupper() or char.isdigit():
            return char
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
        # Rules that judge a name (headers, key-value pairs, name/value fields, elements,
        # arguments) run last, on text the shape rules have already cleaned, and only when
        # a name hint is present (or a tool that takes a password its own way).
        self._pairs = sorted(
            (rule for rule in self.rules if isinstance(rule, _PairRule)), key=lambda r: r.order
        )
        self.rules = [rule for rule in self.rules if not isinstance(rule, _PairRule)]
        self._always: set[Rule] = set()
        # Literals are grouped behind a shorter "gate" substring they all contain (a rule
        # may name its own), so ordinary text pays for fifteen substring tests, not fifty.
        gates: dict[str, dict[str, list[Rule]]] = {}
        long_gates: dict[str, dict[str, list[Rule]]] = {}
        for rule in self.rules:
            literals = (rule.literal,) if isinstance(rule.literal, str) else rule.literal
            if not all(literals) or isinstance(rule, FoldedValueRule):
                self._always.add(rule)
                continue
            for literal in literals:
                long = getattr(rule, "long", False)
                gate = getattr(rule, "gate", None) or (_long_gate if long else _gate)(literal)
                into = long_gates if long else gates
                into.setdefault(gate, {}).setdefault(literal, []).append(rule)
        self._gates = [(gate, list(items.items())) for gate, items in gates.items()]
        self._long_gates = [(gate, list(items.items())) for gate, items in long_gates.items()]
        # The rules matched in any case run only where one of their literals is in the
        # lowercased text: a substring test of each literal, in C (``map``), not a test per
        # rule (a regex alternation of them scanned 30% slower: its first letters, "b",
        # "s", "a", "e"…, start a trial at nearly every position).
        folded = [rule for rule in self.rules if isinstance(rule, FoldedValueRule)]
        folded_literals = [
            lit
            for rule in folded
            for lit in ((rule.literal,) if isinstance(rule.literal, str) else rule.literal)
        ]
        self._unfolded_always = self._always.difference(folded)
        self._folded_gate = tuple(folded_literals) if folded and all(folded_literals) else None
        # Rules run in list order, but only those a string calls for: a string walks the
        # few rules its gates named, not all eighty (the walk itself cost more than the
        # substring tests once the rule list doubled).
        self._position = {rule: i for i, rule in enumerate(self.rules)}
        self._folded_by_literal = (
            tuple(
                (lit, rule)
                for rule in folded
                for lit in ((rule.literal,) if isinstance(rule.literal, str) else rule.literal)
            )
            if self._folded_gate is not None
            else None
        )
        self.rule_names = frozenset(
            {rule.name for rule in self.rule_set}
            | {_SECRET_KEY_RULE, _NAME_VALUE_RULE, "truncated", LONE_SURROGATE}
        )
        # Object keys repeat across a transcript; their redaction is computed once.
        self._key = functools.lru_cache(maxsize=4096)(self._redact_key)
        self.max_length = max_length
        self.truncation_marker = truncation_marker
        marker = re.escape(truncation_marker).replace(re.escape("{removed}"), r"\d+")
        self._cut = re.compile(marker + r"\Z")
        self._memory: _Memo | None = None

    # -- public API --------------------------------------------------------------

    def redact(self, obj: Any) -> Any:
        return self.redact_with_counts(obj)[0]

    def remembering(self) -> Redactor:
        """This redactor, keeping what it made of every text it was given: a text met in an
        earlier call is a dictionary lookup, with the same result and counts. Every value
        is still walked in each call (a key, a name/value pair or a command line can call
        for a text to be hidden wherever it sits). For one piece of work (a request's
        spans, then the runs assembled from them), never for long: it holds every
        distinct text."""
        twin = copy.copy(self)
        twin._memory = _Memo(twin)
        return twin

    def _new_memo(self) -> _Memo:
        return self._memory if self._memory is not None else _Memo(self)

    def redact_with_counts(self, obj: Any) -> tuple[Any, Counter[str]]:
        counts: Counter[str] = Counter()
        memo = self._new_memo()
        try:
            return self._walk(obj, counts, memo), counts
        except RecursionError:
            # Nested deeper than Python's stack (a list 500 deep is valid JSON): the same
            # walk with a stack of its own, slower but bounded only by memory.
            counts = Counter()
            return self._walk_deep(obj, counts, memo), counts

    def redact_with_report(self, obj: Any, path: str = "$") -> tuple[Any, Counter[str], list[dict[str, Any]]]:
        """Like ``redact_with_counts``, plus which fields changed and by which rules:
        ``[{"path": "$.iterations[0].thought", "rules": {"openai": 1}}]`` (never the values)."""
        counts: Counter[str] = Counter()
        fields: list[dict[str, Any]] = []
        memo = self._new_memo()
        try:
            return self._walk_report(obj, counts, path, fields, memo), counts, fields
        except RecursionError:
            counts, fields = Counter(), []
            return self._walk_deep(obj, counts, memo, fields, path), counts, fields

    def _walk_deep(
        self,
        root: Any,
        counts: Counter[str],
        memo: _Memo,
        fields: list[dict[str, Any]] | None = None,
        path: str = "$",
    ) -> Any:
        """``_walk`` (with ``fields``: ``_walk_report``) without recursion. Each task puts
        the redacted copy of a value into its parent's slot; a value under a secret key is
        hidden (``_hidden``) by tasks of its own, which mark their key's cell when they
        replace something."""
        holder: list[Any] = [None]
        # (value, parent, slot, path, cell): cell is None to walk, or a hidden key's cell.
        stack: list[tuple[Any, Any, Any, str, list[Any] | None]] = [(root, holder, 0, path, None)]
        hidden_cells: list[list[Any]] = []
        while stack:
            obj, parent, slot, here, cell = stack.pop()
            if cell is not None:  # hiding: strings go, shapes and other values stay
                if isinstance(obj, str):
                    if obj and not obj.startswith(_MARKER_START):
                        parent[slot] = _SECRET_KEY_MARKER
                        cell[0] = True
                    else:
                        parent[slot] = obj
                elif isinstance(obj, dict):
                    out: dict[Any, Any] = {}
                    parent[slot] = out
                    for key, item in obj.items():
                        new_key = _distinct(out, self._key(key)[0] if isinstance(key, str) else key)
                        out[new_key] = None
                        stack.append((item, out, new_key, here, cell))
                elif isinstance(obj, list | tuple):
                    items: list[Any] = [None] * len(obj)
                    parent[slot] = items
                    stack.extend((item, items, i, here, cell) for i, item in enumerate(obj))
                else:
                    parent[slot] = obj
                continue
            if isinstance(obj, str):
                cleaned, local = memo[obj]
                if local:
                    counts.update(local)
                    if fields is not None:
                        fields.append({"path": here, "rules": dict(local)})
                parent[slot] = cleaned
            elif isinstance(obj, dict):
                out = {}
                parent[slot] = out
                named_secret = self._names_a_secret(obj)
                jwk = _is_jwk(obj)
                for key, value in obj.items():
                    if jwk and key in JWK_PRIVATE_MEMBERS and _has_content(value):
                        counts[_JWK_RULE] += 1
                        if fields is not None:
                            fields.append({"path": f"{here}.{key}", "rules": {_JWK_RULE: 1}})
                        out[key] = _JWK_MARKER
                        continue
                    new_key, key_counts, secret = self._key(key) if isinstance(key, str) else (key, (), False)
                    new_key = _distinct(out, new_key)
                    child = f"{here}.{new_key}" if fields is not None else here  # paths for a report
                    if key_counts:
                        counts.update(dict(key_counts))
                        if fields is not None:
                            fields.append({"path": child, "rules": dict(key_counts), "part": "key"})
                    if secret and _is_numeric_password(key, value):
                        counts[_SECRET_KEY_RULE] += 1
                        if fields is not None:
                            fields.append({"path": child, "rules": {_SECRET_KEY_RULE: 1}})
                        out[new_key] = _SECRET_KEY_MARKER
                        continue
                    if secret and _has_content(value):
                        hidden: list[Any] = [False, child]
                        hidden_cells.append(hidden)
                        out[new_key] = None
                        stack.append((value, out, new_key, child, hidden))
                        continue
                    if named_secret and key in _VALUE_FIELDS and _has_content(value) and _has_text(value):
                        counts[_NAME_VALUE_RULE] += 1
                        if fields is not None:
                            fields.append({"path": child, "rules": {_NAME_VALUE_RULE: 1}})
                        out[new_key] = _NAME_VALUE_MARKER
                        continue
                    out[new_key] = None
                    stack.append((value, out, new_key, child, None))
            elif isinstance(obj, list | tuple):
                items = [None] * len(obj)
                parent[slot] = items
                if len(obj) > 1 and all(type(item) is str for item in obj):
                    for i, item in enumerate(obj):  # strings: at once, then perhaps a command line
                        cleaned, local = memo[item]
                        if local:
                            counts.update(local)
                            if fields is not None:
                                fields.append({"path": f"{here}[{i}]", "rules": dict(local)})
                        items[i] = cleaned
                    if _may_be_argv(items):
                        parent[slot] = self._argv(items, counts, fields, here)
                else:
                    stack.extend(
                        (item, items, i, f"{here}[{i}]" if fields is not None else here, None)
                        for i, item in reversed(list(enumerate(obj)))
                    )
            else:
                parent[slot] = obj
        for replaced, child in hidden_cells:
            if replaced:
                counts[_SECRET_KEY_RULE] += 1
                if fields is not None:
                    fields.append({"path": child, "rules": {_SECRET_KEY_RULE: 1}})
        return holder[0]

    def _walk_report(
        self,
        obj: Any,
        counts: Counter[str],
        path: str,
        fields: list[dict[str, Any]],
        memo: _Memo,
    ) -> Any:
        if isinstance(obj, str):
            cleaned, local = memo[obj]
            if local:
                fields.append({"path": path, "rules": dict(local)})
                counts.update(local)
            return cleaned
        if isinstance(obj, dict):
            out: dict[Any, Any] = {}
            named_secret = self._names_a_secret(obj)
            jwk = _is_jwk(obj)
            for key, value in obj.items():
                new_key, key_counts, secret = self._key(key) if isinstance(key, str) else (key, (), False)
                if jwk and key in JWK_PRIVATE_MEMBERS and _has_content(value):
                    counts[_JWK_RULE] += 1
                    fields.append({"path": f"{path}.{new_key}", "rules": {_JWK_RULE: 1}})
                    out[new_key] = _JWK_MARKER
                    continue
                if new_key in out:
                    new_key = _distinct(out, new_key)
                if key_counts or secret or named_secret:
                    child = f"{path}.{new_key}"
                    if key_counts:
                        counts.update(dict(key_counts))
                        fields.append({"path": child, "rules": dict(key_counts), "part": "key"})
                    if secret and (_has_content(value) or _is_numeric_password(key, value)):
                        hidden, replaced = (
                            (_SECRET_KEY_MARKER, True) if type(value) is int else self._hidden(value)
                        )
                        if replaced:
                            counts[_SECRET_KEY_RULE] += 1
                            fields.append({"path": child, "rules": {_SECRET_KEY_RULE: 1}})
                        out[new_key] = hidden
                        continue
                    if named_secret and key in _VALUE_FIELDS and _has_content(value) and _has_text(value):
                        counts[_NAME_VALUE_RULE] += 1
                        fields.append({"path": child, "rules": {_NAME_VALUE_RULE: 1}})
                        out[new_key] = _NAME_VALUE_MARKER
                        continue
                out[new_key] = self._report_child(value, counts, path, new_key, False, fields, memo)
            return out
        if isinstance(obj, list | tuple):
            items = [self._report_child(v, counts, path, i, True, fields, memo) for i, v in enumerate(obj)]
            if len(items) > 1 and type(items[0]) is str and _may_be_argv(items):
                return self._argv(items, counts, fields, path)
            return items
        return obj

    def _report_child(
        self,
        value: Any,
        counts: Counter[str],
        path: str,
        key: Any,
        index: bool,
        fields: list[dict[str, Any]],
        memo: _Memo,
    ) -> Any:
        """``_walk_report`` of a child (a dict's under ``key``, a list's at ``index`` ``key``),
        whose path is written only when a rule fired or it holds more values: most values
        of a transcript are plain numbers or texts no rule touches."""
        kind = type(value)
        if kind is str:
            cleaned, local = memo[value]
            if local:
                fields.append({"path": _child_path(path, key, index), "rules": dict(local)})
                counts.update(local)
            return cleaned
        if value is None or kind is int or kind is float or kind is bool:
            return value
        return self._walk_report(value, counts, _child_path(path, key, index), fields, memo)

    def redact_text(self, text: str, counts: Counter[str] | None = None) -> str:
        counts = counts if counts is not None else Counter()
        # Plain ASCII without a backslash or an encoded character (most strings) hides
        # nothing: straight to the rules.
        # (The tests of _may_encode_a_separator and _may_encode_a_pair, in one search each,
        # after one memchr each for '&' and '%', which decides for most strings.)
        if (
            text.isascii()
            and "\\" not in text
            and ("&" not in text or _ENCODED_ENTITY.search(text) is None)
            and ("%" not in text or _PERCENT_ENCODED.search(text) is None)
        ):
            text = self._redact_shapes(text, counts)
        else:
            text = self._redact_visible(text, counts)
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
        cleaned = self._redact_visible(key, counts)
        # Judged without the markers, so a second pass judges the key as the first did
        # ("[REDACTED:jwt]" is not a key named "jwt").
        named = _MARKER.sub(" ", cleaned) if _MARKER_START in cleaned else cleaned
        return cleaned, tuple(counts.items()), self.is_secret_key(named)

    def _redact_visible(self, text: str, counts: Counter[str]) -> str:
        """``_redact_shapes``, and again on the text as it reads when what hides a secret
        from a search is taken out: invisible characters inside a word (a zero-width
        space in ``sk-proj-…`` or in ``password``) and Markdown's escaped underscores
        (``ghp\\_…`` renders as ``ghp_…``). When that finds a secret the first pass could
        not see, the string is stored as the second pass left it (without those
        characters); otherwise as the first pass left it, unchanged but for what it
        replaced."""
        # Plain ASCII without a backslash (most text) hides nothing: two tests in C.
        ascii = text.isascii()
        hidden = (
            (not ascii or "\\" in text)
            and (
                ((not ascii or "\\u" in text) and _INVISIBLE_IN_WORD.search(text) is not None)
                or ("\\_" in text and _ESCAPED_UNDERSCORE.search(text) is not None)
                or ("\\u" in text and _ESCAPED_LOOKALIKE.search(text) is not None)
                or (
                    not ascii
                    and _HAS_TOKEN_LOOKALIKE.search(text) is not None
                    and _LOOKALIKE_IN_WORD.search(text) is not None
                )
            )
        ) or (
            (_may_encode_a_separator(text) or "\\u00" in text) and _ENCODED_IN_WORD.search(text) is not None
        )
        encoded = _may_encode_a_pair(text)
        if not hidden and not encoded:
            return self._redact_shapes(text, counts)
        first: Counter[str] = Counter()
        cleaned = self._redact_shapes(text, first)
        visible = _ESCAPED_UNDERSCORE.sub("", _INVISIBLE_IN_WORD.sub("", text))
        if "\\u" in visible:
            visible = _ESCAPED_LOOKALIKE.sub(_unescape_lookalike, visible)
        if not visible.isascii():
            # "ѕk-proj-…" (a Cyrillic "ѕ"): the look-alike letters of a token, read as ASCII.
            visible = _LOOKALIKE_IN_WORD.sub(_as_ascii, visible)
        # "sk&#45;proj&#45;…", "sk%2Dproj…", "sk\\u002dproj…": a token's '-' or '_' encoded.
        visible = _ENCODED_IN_WORD.sub(_decoded_separator, visible)
        if encoded:
            # A pair or a URL written in HTML entities or percent-encoded (once or twice):
            # "token&#61;x", "&quot;password&quot;", "password%3Dx", "https%253A//u%253Ax%2540h".
            if "&" in visible:
                visible = html.unescape(visible)
            for _ in range(2):
                if "%" not in visible or _PERCENT_PAIR.search(visible) is None:
                    break
                visible = unquote(visible)
        second: Counter[str] = Counter()
        again = self._redact_shapes(visible, second)
        # The second pass is kept when it left less of the text unreplaced than the first
        # (beyond the characters it took out): it saw a secret, or more of one.
        if _unreplaced(again) < _unreplaced(cleaned) - (len(text) - len(visible)):
            counts.update(second)
            return again
        counts.update(first)
        return cleaned

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
        # A long token's literals are looked for first (substring tests), and the run of
        # 20 token characters (a regex scan) only when one is there: most strings are
        # short or hold none of them.
        if self._long_gates and len(text) >= 20:
            long_wanted = None
            for gate, items in self._long_gates:
                if gate in text:
                    for literal, rules in items:
                        if literal in text:
                            if long_wanted is None:
                                long_wanted = []
                            long_wanted.extend(rules)
            if long_wanted is not None and _LONG_RUN.search(text) is not None:
                if wanted is None:
                    wanted = set()
                wanted.update(long_wanted)
        unchanged = text  # the pair stage reuses ``lowered`` while the text is this one
        lowered = None
        if self._folded_by_literal is None:
            run: Iterable[Rule] = self.rules  # a folded rule without a literal: every rule is tried
        else:
            lowered = text.lower()
            for literal, rule in self._folded_by_literal:
                if literal in lowered:
                    if wanted is None:
                        wanted = set()
                    wanted.add(rule)
            if self._unfolded_always:
                wanted = self._unfolded_always.union(wanted or ())
            run = sorted(wanted, key=self._position.__getitem__) if wanted else ()
        if run:
            folded = lowered  # for the rules matched in any case: lowercased once, not per rule
            for rule in run:
                if isinstance(rule, FoldedValueRule):
                    if folded is None:
                        folded = text.lower()
                    if rule.present(text, folded):
                        cleaned = ValueRule.apply(rule, text, counts, self.extra_keys)
                        if cleaned != text:
                            text, folded = cleaned, None
                elif rule in self._always or (wanted is not None and rule in wanted):
                    cleaned = rule.apply(text, counts, self.extra_keys)
                    if cleaned != text:
                        text, folded = cleaned, None
        # Every pair rule needs a separator, a flag's dash, a quote, a tag or "set NAME
        # VALUE" in its text, and a name hint or a tool's name (written out rather than
        # looped over: this runs for every string; a test keeps the lists in step).
        if self._pairs and (
            ":" in text
            or "=" in text
            or "-" in text
            or "'" in text
            or '"' in text
            or "<" in text
            or "&" in text
            or "set" in text
            or "\\" in text
            or "：" in text
            or "＝" in text
            or "\n" in text
            or " is " in text  # a sentence that gives a secret (ProseRule)
            or " was " in text
            or "_" in text  # rabbitmqctl add_user (PositionalRule)
        ):
            if lowered is None or text is not unchanged or not lowered.isascii():
                lowered = _lowered(text)
            hinted = (
                "pass" in lowered
                or "pwd" in lowered
                or "secret" in lowered
                or "token" in lowered
                or "key" in lowered
                or "auth" in lowered
                or "cookie" in lowered
                or "credential" in lowered
                or "jwt" in lowered
                or "bearer" in lowered
                or "sessionid" in lowered
                or "sessid" in lowered
            )
            if (
                hinted
                or (
                    "-" in text  # most text has no dash: no call
                    and _has_a_flag(text)
                    and (
                        "curl" in lowered
                        or "mysql" in lowered
                        or "mariadb" in lowered
                        or "sshpass" in lowered
                        or "login" in lowered
                        or "redis-cli" in lowered
                        or "mongo" in lowered
                        or "http " in lowered
                        or "https " in lowered
                        or "openssl" in lowered
                        or "zip" in lowered
                        or "7z" in lowered
                        or "sqlcmd" in lowered
                    )
                )
                or "dentified" in lowered
                or "rabbitmqctl" in lowered
                or "getconnection" in lowered
            ):
                for rule in self._pairs:
                    if (hinted or isinstance(rule, ArgumentRule | PositionalRule)) and rule.wants(
                        text, lowered
                    ):
                        text = rule.apply(text, counts, self.extra_keys)
        return text

    def _already_cut(self, text: str) -> bool:
        """A value this redactor cut before (re-sent as it was stored) is not cut again."""
        assert self.max_length is not None
        return len(text) <= self.max_length + 40 and self._cut.search(text, self.max_length) is not None

    def is_secret_key(self, key: str) -> bool:
        return is_secret_key(key, self.extra_keys)

    def _names_a_secret(self, obj: dict[Any, Any]) -> bool:
        """True for ``{"name": "DB_PASSWORD", "value": …}`` and its kin (env lists of
        Kubernetes, ECS and GitHub Actions, HAR headers, CloudFormation parameters): an
        object with a value field whose name field names a secret (an identifier, not
        prose)."""
        if len(obj) > 16 or obj.keys().isdisjoint(_VALUE_FIELDS):  # the cheap test first
            return False
        for field in _NAME_FIELDS:
            name = obj.get(field)
            if (
                type(name) is str
                and 0 < len(name) <= _NV_NAME_MAX
                and not any(c.isspace() for c in name)
                and self.is_secret_key(name)
            ):
                return True
        return False

    # -- internals ---------------------------------------------------------------

    def _argv(
        self,
        items: list[Any],
        counts: Counter[str],
        fields: list[dict[str, Any]] | None = None,
        path: str = "",
    ) -> list[Any]:
        """A command line given as a list (``["mysql", "-u", "root", "-pX"]``, ``["curl",
        "-u", "a:X"]``, ``["--password", "X"]``): each flag and the item after one is
        redacted again after the items before it, joined as the command reads, so the
        argument rules see the tool and the flag. Only the item itself is replaced."""
        for i, item in enumerate(items):
            if i == 0 or not (item[:1] == "-" or items[i - 1][:1] == "-"):
                continue
            prefix = " ".join(items[:i]) + " "
            local: Counter[str] = Counter()
            cleaned = self._redact_shapes(prefix + item, local)
            if cleaned.startswith(prefix) and cleaned[len(prefix) :] != item:
                items[i] = cleaned[len(prefix) :]
                counts.update(local)
                if fields is not None:
                    fields.append({"path": f"{path}[{i}]", "rules": dict(local)})
        return items

    def _hidden(self, value: Any) -> tuple[Any, bool]:
        """The value under a secret's key: a string becomes the marker; an object or a
        list keeps its shape, numbers, booleans and nulls ("input_token_details":
        {"cache_read": 0} is a count, not a secret) and loses every string in it. Also
        whether anything was replaced."""
        if isinstance(value, str):
            if value and not value.startswith(_MARKER_START):
                return _SECRET_KEY_MARKER, True
            return value, False
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            replaced = False
            for key, item in value.items():
                new_key = self._key(key)[0] if isinstance(key, str) else key
                out[_distinct(out, new_key)], changed = self._hidden(item)
                replaced = replaced or changed
            return out, replaced
        if isinstance(value, list | tuple):
            items = [self._hidden(item) for item in value]
            return [item for item, _ in items], any(changed for _, changed in items)
        return value, False

    def _walk(self, obj: Any, counts: Counter[str], memo: _Memo) -> Any:
        # Exact type checks first: this runs once per value of a large transcript.
        kind = type(obj)
        if kind is str:
            cleaned, local = memo[obj]
            if local:
                counts.update(local)
            return cleaned
        if kind is dict or isinstance(obj, dict):
            out: dict[Any, Any] = {}
            named_secret = not obj.keys().isdisjoint(_VALUE_FIELDS) and self._names_a_secret(obj)
            jwk = "kty" in obj and _is_jwk(obj)
            for key, value in obj.items():
                new_key = key
                if jwk and key in JWK_PRIVATE_MEMBERS and _has_content(value):
                    counts[_JWK_RULE] += 1
                    out[key] = _JWK_MARKER
                    continue
                if type(key) is str:
                    new_key, key_counts, secret = self._key(key)
                    if key_counts:
                        counts.update(dict(key_counts))
                    if new_key in out:
                        new_key = _distinct(out, new_key)
                    if secret and (_has_content(value) or _is_numeric_password(key, value)):
                        hidden, replaced = (
                            (_SECRET_KEY_MARKER, True) if type(value) is int else self._hidden(value)
                        )
                        if replaced:
                            counts[_SECRET_KEY_RULE] += 1
                        out[new_key] = hidden
                        continue
                    if named_secret and key in _VALUE_FIELDS and _has_content(value) and _has_text(value):
                        counts[_NAME_VALUE_RULE] += 1
                        out[new_key] = _NAME_VALUE_MARKER
                        continue
                # A text or a number (most values) without a call of its own.
                kind = type(value)
                if kind is str:
                    cleaned, local = memo[value]
                    if local:
                        counts.update(local)
                    out[new_key] = cleaned
                elif value is None or kind is int or kind is float or kind is bool:
                    out[new_key] = value
                else:
                    out[new_key] = self._walk(value, counts, memo)
            return out
        if kind is list or kind is tuple or isinstance(obj, list | tuple):
            items = [self._walk(v, counts, memo) for v in obj]
            # A command line as a list of strings; most lists hold objects (checked first).
            if len(items) > 1 and type(items[0]) is str and _may_be_argv(items):
                return self._argv(items, counts)
            return items
        if isinstance(obj, str):
            return self.redact_text(str(obj), counts)
        return obj


class _Memo(dict[str, tuple[str, Counter[str]]]):
    """Each text of one walk redacted once, with the rules that fired: a dictionary
    lookup for a text seen before (a model call's messages repeat the run's input,
    thoughts and observations; roles and names repeat everywhere). A text no rule touched
    (most) shares one empty count, not a ``Counter`` of its own (each costs a call)."""

    __slots__ = ("redactor", "scratch")

    def __init__(self, redactor: Redactor):
        super().__init__()
        self.redactor = redactor
        self.scratch: Counter[str] = Counter()

    def __missing__(self, text: str) -> tuple[str, Counter[str]]:
        local = self.scratch
        cleaned = self.redactor.redact_text(text, local)
        if local:
            self.scratch = Counter()
            found = (cleaned, local)
        else:
            found = (cleaned, _NO_COUNTS)
        self[text] = found
        return found


_NO_COUNTS: Counter[str] = Counter()  # never written: read by ``if local:`` only


MAX_ARGV_ITEMS = 64
MAX_ARGV_CHARS = 4096


def _may_be_argv(items: list[Any]) -> bool:
    """A short list of strings with a flag in it: perhaps a command line."""
    return (
        1 < len(items) <= MAX_ARGV_ITEMS
        and any(type(item) is str and item[:1] == "-" for item in items)
        and all(type(item) is str for item in items)
        and sum(map(len, items)) <= MAX_ARGV_CHARS
    )


def _has_a_flag(text: str) -> bool:
    """Whether a '-' starts a word or a quoted item (" -p", and '"-p' in an argv written
    as JSON). The first dashes are looked at one by one (each found by ``memchr``): two
    two-character searches would read every character of the text (a short text's three
    searches cost less than the loop)."""
    if len(text) <= 32:
        return " -" in text or '"-' in text or "\t-" in text
    pos = text.find("-")
    looked = 0
    while looked < 16:
        if pos < 0:
            return False
        if pos > 0 and text[pos - 1] in ' "\t':
            return True
        pos = text.find("-", pos + 1)
        looked += 1
    return " -" in text or '"-' in text or "\t-" in text


def _unreplaced(text: str) -> int:
    """How many characters of ``text`` are not redaction markers."""
    return len(text) - sum(len(m) for m in _MARKER.findall(text)) if _MARKER_START in text else len(text)


def _is_jwk(obj: dict[Any, Any]) -> bool:
    """A JSON Web Key: an object with a "kty" (key type) string."""
    return isinstance(obj.get("kty"), str)


_JWK_RULE = JwkRule.name
_JWK_MARKER = JwkRule.marker


def _child_path(path: str, key: Any, index: bool) -> str:
    """A report path: ``$.a.b`` under a key, ``$.a[2]`` at a list index."""
    return f"{path}[{key}]" if index else f"{path}.{key}"


def _has_content(value: Any) -> bool:
    # Numbers under secret-like keys are metrics ("time_to_first_token": 0.4), not secrets.
    if value is None or isinstance(value, bool | int | float):
        return False
    if isinstance(value, str):
        return bool(value) and not value.startswith("[REDACTED")
    return not (isinstance(value, dict | list) and not value)


def _is_numeric_password(key: str, value: Any) -> bool:
    """An integer under a key that names a password itself ("password": 123456789), not a
    number beside one ("token_count": 12, "password_min_length": 12 are not secret keys)."""
    return type(value) is int and _names_a_password(key)


@functools.lru_cache(maxsize=1024)
def _names_a_password(key: str) -> bool:
    words = key_words(fold_lookalikes(key))
    return bool(words) and words[-1] in _PASSWORD_WORDS


_PASSWORD_WORDS = _words("password passwd pwd passcode passphrase pin")


def _has_text(value: Any) -> bool:
    """Whether a value holds a string anywhere (an object of counts holds none); without
    recursion, however deep the value."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


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
_NAME_VALUE_RULE = NameValueRule.name
_NAME_VALUE_MARKER = NameValueRule.marker
# The fields of a name/value object, as the formats that use them spell them.
_NAME_FIELDS = (
    "name",
    "Name",
    "NAME",
    "key",
    "Key",
    "KEY",
    "ParameterKey",
    "parameterKey",
    "ParameterName",
    "parameterName",
    "variable",
    "Variable",
)
_VALUE_FIELDS = frozenset(
    {"value", "Value", "VALUE", "ParameterValue", "parameterValue", "SecretValue", "secretValue"}
)
_CUSTOM_RULE = re.compile(r"custom-[0-9]{1,4}")
_default = Redactor()


def redact(obj: Any) -> Any:
    """A deep copy of ``obj`` with every secret replaced by ``[REDACTED:<rule>]``."""
    return _default.redact(obj)
