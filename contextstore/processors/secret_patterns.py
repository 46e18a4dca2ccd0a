"""The secret pattern set: named, typed regexes with a confidence level.

``high`` patterns have a distinctive shape (a vendor prefix, a PEM header, a
``user:pass@`` URL, a value assigned to a password-like name) and are on by default.
``medium`` patterns (publishable keys, high-entropy values assigned to secret-sounding
names) are opt-in because they also hit harmless values. Formats follow each vendor's
documented token shape; Gemini CLI's environment-sanitisation list was the seed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

HIGH = "high"
MEDIUM = "medium"
CONFIDENCE_LEVELS = {HIGH: (HIGH,), MEDIUM: (HIGH, MEDIUM)}
"""Which pattern levels each ``confidence`` setting enables."""

ENTROPY_RATIO = 0.75
"""A generic secret value needs at least this share of the highest entropy its length and
alphabet allow (see :func:`entropy_threshold`)."""

GENERIC_MIN_LENGTH = 16
"""Minimum length of a generic secret value."""

# Token boundaries exclude letters, digits and "_" only: if "-" also blocked a match, a
# token glued to a PEM "-----END ...-----" line would surface only after the key was
# masked, and masking would not be idempotent.
_ESCAPED = r"|(?<=\\[nrt])|(?<=%[0-9A-Fa-f]{2})"
"""Also a start: right after an escape that ends in a letter or digit, as a secret sits in
JSON-encoded text (``...\\nghp_...``) or in a URL-encoded query (``token%3Dghp_...``)."""
_START = r"(?:(?<![A-Za-z0-9_])" + _ESCAPED + ")"
_END = r"(?![A-Za-z0-9_])"
_KEY_PREFIX = r"(?:^|(?<=[\s,{;(&?\"']))[A-Za-z0-9_.\-]*"
_SEPARATOR = r"[\"']?\s*(?:=>|:=|[:=])\s*"
_VALUE = r"(?:\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"'&;,)\]}<>]+))"
_VALUE_GROUPS = ("dq", "sq", "bare")

_PLACEHOLDER_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "token",
        "none",
        "null",
        "nil",
        "true",
        "false",
        "undefined",
        "redacted",
        "placeholder",
        "example",
        "changeme",
        "required",
        "optional",
        "string",
        "str",
        "hidden",
        "masked",
    }
)
_PLACEHOLDER_SHAPE = re.compile(
    r"""^(?:
        <[^>]*>                       # <your password>
      | \$\{[^}]*\} | \$\(.*\) | \$[A-Za-z_][A-Za-z0-9_]*   # ${VAR}, $(cmd), $VAR
      | \{\{.*\}\} | \{[^}]*\}        # {{ template }}, {name}
      | %\(?[A-Za-z_]*\)?s            # %s, %(name)s
      | your[_\-\s]?[A-Za-z0-9_\-\s]*   # your_password, YOUR-TOKEN-HERE
      | (?:my|example|dummy|sample|fake)[_\-\s][A-Za-z0-9_\-\s]*
      | [xX*.#•_\-]+                  # ****, xxxx, ....
    )$""",
    re.VERBOSE | re.IGNORECASE,
)
_IDENTIFIER_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class SecretPattern:
    """One kind of secret: its regex, its confidence level and an optional value check.

    Attributes:
        kind: Name used in the marker, ``[REDACTED:<kind>]``, and in findings.
        regex: Compiled pattern. The first of ``groups`` that took part in a match is the
            span masked; without one, the whole match is masked. This keeps context such
            as ``password=`` or a URL's user and host visible.
        confidence: ``"high"`` or ``"medium"``.
        description: What the pattern recognises, for documentation.
        groups: Names of the groups that can hold the secret value.
        validator: Called with the match and the secret text; returning False skips the
            match (placeholders, variable names, low-entropy values).
    """

    kind: str
    regex: re.Pattern[str]
    confidence: str
    description: str
    groups: tuple[str, ...] = ("secret",)
    validator: Callable[[re.Match[str], str], bool] | None = None
    hints: tuple[str, ...] = ()
    """Lower-case substrings one of which any match contains; a text without any of them
    is not searched (most text holds no secret, and this skips most regex scans)."""

    def may_match(self, lowered: str) -> bool:
        """False when ``lowered`` (the text, lower-cased) cannot contain a match."""
        return not self.hints or any(hint in lowered for hint in self.hints)

    def secret_span(self, match: re.Match[str]) -> tuple[int, int]:
        """Return the span of ``match`` that holds the secret itself."""
        for group in self.groups:
            if group in self.regex.groupindex and match.start(group) >= 0:
                return match.span(group)
        return match.span()


def shannon_entropy(value: str) -> float:
    """Return the Shannon entropy of ``value`` in bits per character (0.0 when empty)."""
    if not value:
        return 0.0
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in Counter(value).values())


def entropy_threshold(value: str) -> float:
    """Return the entropy ``value`` needs to pass as random, in bits per character.

    A random string cannot exceed ``log2`` of its length or of its alphabet (16 for hex,
    64 otherwise), so a fixed bar would reject most random hex keys; the bar is
    :data:`ENTROPY_RATIO` of that ceiling instead.
    """
    alphabet = 16 if all(c in "0123456789abcdefABCDEF" for c in value) else 64
    return ENTROPY_RATIO * math.log2(max(2, min(len(value), alphabet)))


def is_placeholder(value: str) -> bool:
    """Return True if ``value`` looks like a template, example or already-masked value."""
    stripped = value.strip()
    lowered = stripped.lower()
    return (
        not stripped
        or "redacted" in lowered
        or lowered in _PLACEHOLDER_WORDS
        or "example" in lowered
        or _PLACEHOLDER_SHAPE.match(stripped) is not None
    )


def _distinctive(_match: re.Match[str], secret: str) -> bool:
    """Reject vendor-prefixed placeholders such as ``ghp_xxxxxxxx...``."""
    return len(set(secret)) >= 8 and "EXAMPLE" not in secret.upper()


_PASSWORD_SETTING = re.compile(r"(?i)(?:password|passwd|passphrase)[_.\-][A-Za-z]")
"""A name that goes on after the password word (``PASSWORD_RESET_TIMEOUT``,
``password_min_length``): a setting about passwords, whose number is not one."""


def _password_value(match: re.Match[str], secret: str) -> bool:
    """Accept a value assigned to a password-like name unless it is clearly not a secret.

    Quoted values are accepted unless they are placeholders. A bare value must also not
    look like code (a call, an index, a variable or attribute name without digits), a
    URL or a path, and a bare value after ``:`` only counts at the start of a line
    (YAML, headers, ``env`` output), so prose such as ``the password: see below`` is
    left alone.
    """
    if len(secret) < 3 or is_placeholder(secret):
        return False
    if "bare" not in match.re.groupindex or match.start("bare") < 0:
        return True
    if len(secret) < 4 or "://" in secret or secret.startswith(("/", "~/", "./", "!")):
        return False  # ... or a YAML tag (ansible_become_password: !vault |)
    if (
        secret.isdigit()
        and "key" in match.re.groupindex
        and _PASSWORD_SETTING.search(match.group("key") or "")
    ):
        return False  # PASSWORD_RESET_TIMEOUT=259200 sets something about passwords
    if any(c in secret for c in "([{") or secret.endswith(":"):
        return False
    if _IDENTIFIER_PATH.match(secret) and not any(c.isdigit() for c in secret):
        return False
    if "sep" in match.re.groupindex and match.group("sep").strip() == ":":
        text = match.string
        line_start = text.rfind("\n", 0, match.start("key")) + 1
        return text[line_start : match.start("key")].strip() in ("", "-")
    return True


def _generic_value(_match: re.Match[str], secret: str) -> bool:
    return looks_generic(secret)


def looks_generic(secret: str) -> bool:
    """Accept a long, high-entropy, single-token value that is not a placeholder."""
    return (
        len(secret) >= GENERIC_MIN_LENGTH
        and not any(c.isspace() for c in secret)
        and "://" not in secret
        and not secret.startswith(("/", "~/", "./", "$", "%"))
        and not (_IDENTIFIER_PATH.match(secret) and not any(c.isdigit() for c in secret))
        and not is_placeholder(secret)
        and shannon_entropy(secret) >= entropy_threshold(secret)
    )


def _url_password(_match: re.Match[str], secret: str) -> bool:
    """Accept what a URL holds in its password place unless it is a placeholder or a port.

    The place itself says it is a password, so a short or simple one (``guest``,
    ``s3cr3t``) counts, as a quoted value assigned to a password-like name does; only
    digits that could be a port (``http://host:8080@...``) are left alone.
    """
    if len(secret) < 3 or is_placeholder(secret):
        return False
    return not (secret.isdigit() and len(secret) <= 5)


def _not_placeholder(_match: re.Match[str], secret: str) -> bool:
    return not is_placeholder(secret) and len(set(secret)) >= 6


def _pattern(
    kind: str,
    regex: str,
    description: str,
    *,
    confidence: str = HIGH,
    flags: int = 0,
    groups: tuple[str, ...] = ("secret",),
    validator: Callable[[re.Match[str], str], bool] | None = _distinctive,
) -> SecretPattern:
    return SecretPattern(
        hints=_HINTS[kind],
        kind=kind,
        regex=re.compile(regex, flags),
        confidence=confidence,
        description=description,
        groups=groups,
        validator=validator,
    )


_HINTS: dict[str, tuple[str, ...]] = {
    "private_key": ("private key",),
    "anthropic_api_key": ("sk-ant-",),
    "openai_api_key": ("sk-",),
    "aws_access_key_id": ("akia", "asia"),
    "aws_secret_access_key": ("secret",),
    "aws_session_token": ("session", "security-token"),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab_token": ("glpat-", "gldt-", "glptt-", "glrt-", "glsoat-", "glft-"),
    "slack_token": ("xox", "xapp-"),
    "slack_webhook": ("hooks.slack.com",),
    "stripe_secret_key": ("sk_live_", "sk_test_", "rk_live_", "rk_test_"),
    "stripe_webhook_secret": ("whsec_",),
    "google_api_key": ("aiza",),
    "google_oauth_client_secret": ("gocspx-",),
    "google_oauth_token": ("ya29.",),
    "huggingface_token": ("hf_",),
    "npm_token": ("npm_",),
    "pypi_token": ("pypi-",),
    "sendgrid_api_key": ("sg.",),
    "azure_storage_key": ("accountkey=",),
    "jwt": ("eyj",),
    "bearer_token": ("bearer",),
    "basic_auth": ("authorization",),
    "url_password": ("://",),
    "password": ("pass",),
    "stripe_publishable_key": ("pk_live_", "pk_test_"),
    "generic_secret": ("secret", "token", "key", "credential", "pass"),
}
"""For each kind, substrings (lower case) every match of its patterns contains."""

_PEM_LABEL = r"(?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP |SSH2 ENCRYPTED )?PRIVATE KEY(?: BLOCK)?"
_PASSWORD_KEY = _KEY_PREFIX + r"(?:password|passwd|passphrase)[A-Za-z0-9_.\-]*"
_SECRET_KEY = (
    _KEY_PREFIX + r"(?:secret|token|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key"
    r"|auth[_\-]?key|client[_\-]?secret|credentials?|password|passwd)"
)

PATTERNS: tuple[SecretPattern, ...] = (
    _pattern(
        "private_key",
        r"-----BEGIN (?P<label>" + _PEM_LABEL + r")-----"
        r"(?:[\s\S]*?-----END (?P=label)-----|[A-Za-z0-9+/=\s\\:,.\-]*)",
        "PEM private key block (RSA, EC, DSA, OPENSSH, PGP, encrypted PKCS#8); the whole "
        "block is masked, and a block cut before its END line is masked to its end",
        validator=None,
    ),
    _pattern(
        "anthropic_api_key",
        _START + r"sk-ant-(?:api|admin|oat|ort|sid)[0-9]{2}-[A-Za-z0-9_\-]{32,}" + _END,
        "Anthropic API, admin and OAuth keys (sk-ant-api03-..., sk-ant-admin01-...)",
    ),
    _pattern(
        "openai_api_key",
        _START + r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}" + _END,
        "OpenAI project, service-account and admin keys (sk-proj-..., sk-svcacct-...)",
    ),
    _pattern(
        "openai_api_key",
        _START + r"sk-[A-Za-z0-9]{48}" + _END,
        "OpenAI legacy user keys: sk- and exactly 48 letters and digits",
    ),
    _pattern(
        "aws_access_key_id",
        r"(?:(?<![A-Za-z0-9])" + _ESCAPED + r")(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])",
        "AWS access key ids (AKIA long-term, ASIA temporary)",
    ),
    _pattern(
        "aws_secret_access_key",
        r"(?i)(?:aws_?secret_?(?:access_?)?key|secret_?access_?key)"
        + _SEPARATOR
        + r"[\"']?(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        "AWS secret access keys assigned to aws_secret_access_key / SecretAccessKey",
    ),
    _pattern(
        "aws_session_token",
        r"(?i)(?:aws_?session_?token|sessiontoken|x-amz-security-token)"
        + _SEPARATOR
        + r"[\"']?(?P<secret>[A-Za-z0-9/+=]{100,})",
        "AWS session tokens assigned to aws_session_token / SessionToken",
    ),
    _pattern(
        "github_token",
        _START + r"(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{50,})" + _END,
        "GitHub tokens: classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained github_pat_",
    ),
    _pattern(
        "gitlab_token",
        _START + r"gl(?:pat|dt|ptt|rt|soat|ft)-[A-Za-z0-9_\-]{20,}(?:\.[A-Za-z0-9_\-]+)*" + _END,
        "GitLab personal, deploy, trigger, runner and feed tokens (glpat-...)",
    ),
    _pattern(
        "slack_token",
        _START + r"(?:xoxe\.)?xox[abeoprs]-(?:[0-9]+-)+[A-Za-z0-9][A-Za-z0-9\-]{7,}" + _END,
        "Slack bot, user, app and refresh tokens (xoxb-, xoxp-, xoxa-, xoxr-, xoxs-)",
    ),
    _pattern(
        "slack_token",
        _START + r"xapp-[0-9]+-[A-Za-z0-9\-]{20,}" + _END,
        "Slack app-level tokens (xapp-)",
    ),
    _pattern(
        "slack_webhook",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/"
        r"(?P<secret>[A-Za-z0-9_/\-]{20,})",
        "Slack incoming-webhook URLs; the host and route stay visible",
    ),
    _pattern(
        "stripe_secret_key",
        _START + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,247}" + _END,
        "Stripe secret and restricted keys (sk_live_, sk_test_, rk_live_, rk_test_)",
    ),
    _pattern(
        "stripe_webhook_secret",
        _START + r"whsec_[A-Za-z0-9+/=]{32,}" + _END,
        "Stripe webhook signing secrets (whsec_)",
    ),
    _pattern(
        "google_api_key",
        _START + r"AIza[0-9A-Za-z_\-]{35}" + _END,
        "Google API keys: AIza and 35 more characters",
    ),
    _pattern(
        "google_oauth_client_secret",
        _START + r"GOCSPX-[A-Za-z0-9_\-]{28}" + _END,
        "Google OAuth client secrets (GOCSPX-)",
    ),
    _pattern(
        "google_oauth_token",
        _START + r"ya29\.[0-9A-Za-z_\-]{30,}" + _END,
        "Google OAuth access tokens (ya29.)",
    ),
    _pattern(
        "huggingface_token",
        _START + r"hf_[A-Za-z0-9]{34,}" + _END,
        "Hugging Face access tokens (hf_)",
    ),
    _pattern(
        "npm_token",
        _START + r"npm_[A-Za-z0-9]{36}" + _END,
        "npm access tokens (npm_)",
    ),
    _pattern(
        "pypi_token",
        _START + r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}" + _END,
        "PyPI API tokens (pypi-AgEIcHlwaS5vcmc...)",
    ),
    _pattern(
        "sendgrid_api_key",
        _START + r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}" + _END,
        "SendGrid API keys (SG.<22>.<43>)",
    ),
    _pattern(
        "azure_storage_key",
        r"(?i)AccountKey=(?P<secret>[A-Za-z0-9+/]{86}==)",
        "Azure storage account keys in connection strings (AccountKey=...)",
    ),
    _pattern(
        "jwt",
        _START + r"eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{8,}" + _END,
        "JSON Web Tokens: three base64url segments, header and payload starting eyJ",
        validator=None,
    ),
    _pattern(
        "bearer_token",
        r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{20,}=*)",
        "Bearer tokens (Authorization: Bearer ...)",
        validator=_not_placeholder,
    ),
    _pattern(
        "basic_auth",
        r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?basic\s+(?P<secret>[A-Za-z0-9+/]{8,}={0,2})",
        "HTTP Basic credentials in an Authorization header",
        validator=_not_placeholder,
    ),
    _pattern(
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.\-]{1,30}://[^\s:/?#@'\"<>\[\]]*:"
        r"(?P<secret>[^\s/?#@'\"<>]+)@[A-Za-z0-9\[]",
        "Passwords in URLs (scheme://user:password@host); user and host stay visible",
        validator=_url_password,
    ),
    _pattern(
        "password",
        r"(?i)(?P<key>" + _PASSWORD_KEY + r")(?P<sep>" + _SEPARATOR + r")" + _VALUE,
        'Values assigned to password-like names (password=, passwd:, "password": ...)',
        groups=_VALUE_GROUPS,
        validator=_password_value,
    ),
    _pattern(
        "password",
        r"(?i)(?<!\S)(?P<key>--?(?:password|passwd))\s+" + _VALUE,
        "Password command-line options (--password VALUE)",
        groups=_VALUE_GROUPS,
        validator=_password_value,
    ),
    _pattern(
        "stripe_publishable_key",
        _START + r"pk_(?:live|test)_[A-Za-z0-9]{20,247}" + _END,
        "Stripe publishable keys: public by design, masked only on request",
        confidence=MEDIUM,
    ),
    _pattern(
        "generic_secret",
        r"(?i)(?P<key>" + _SECRET_KEY + r")" + _SEPARATOR + _VALUE,
        "High-entropy values assigned to names ending in SECRET, TOKEN, API_KEY, "
        "ACCESS_KEY, PRIVATE_KEY, CREDENTIALS or PASSWORD",
        confidence=MEDIUM,
        groups=_VALUE_GROUPS,
        validator=_generic_value,
    ),
)
"""The built-in pattern set, most specific first (earlier patterns win ties)."""


PASSWORD_KEY_NAME = re.compile(r"(?i)(?:password|passwd|passphrase)")
"""A key named like a password: a value held under it is masked whatever its shape."""
SECRET_KEY_NAME = re.compile(
    r"(?i)(?:secret|token|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key"
    r"|auth[_\-]?key|credentials?|password|passwd)$"
)
"""A key named like a secret: at medium confidence a generic-looking value under it is
masked."""
SECRET_KEY_WORD = re.compile(SECRET_KEY_NAME.pattern.removesuffix("$"))
KEY_IN_CONTEXT = re.compile(r"(?i)secret|authorization")
"""A dict key under which a value is masked as ``key=value``: the patterns that recognise
a secret by the name assigned it (``AWS_SECRET_ACCESS_KEY``, ``Authorization``) then see it."""
PASSWORD_FLAG = re.compile(r"(?i)--?(?:password|passwd)")
"""An argument list's flag whose next item is a password (``["mysql", "--password", "x"]``)."""
"""A secret-like key name anywhere in a text (the key check of ``mask_value``)."""
