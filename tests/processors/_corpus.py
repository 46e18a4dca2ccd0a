"""Fake secrets in real formats, and look-alikes that must survive masking.

Every body is generated from a fixed seed and every vendor prefix is joined at run time,
so no complete token appears in the source (GitHub push protection scans for them) and
none of them is, or ever was, a working credential.
"""

from __future__ import annotations

import base64
import random
import string
from dataclasses import dataclass

_RNG = random.Random()
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"


def rand(alphabet: str, n: int) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def pem(label: str, lines: int = 6, newline: str = "\n") -> str:
    body = newline.join(rand(B64, 64) for _ in range(lines))
    return (
        "-----BEGIN " + label + "-----" + newline + body + newline + "-----END " + label + "-----"
    )


def jwt() -> str:
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    claims = base64.urlsafe_b64encode(b'{"sub":"1234567890","name":"Test User"}')
    return header + "." + claims.decode().rstrip("=") + "." + rand(B64URL, 43)


@dataclass(frozen=True)
class Sample:
    """A text holding one fake secret, the kind it must be reported as, and the secret."""

    kind: str
    text: str
    secret: str
    keep: tuple[str, ...] = ()
    """Substrings that must remain visible (assignment names, URL user and host)."""


def _sample(kind: str, template: str, secret: str, *keep: str) -> Sample:
    return Sample(kind, template.format(s=secret), secret, keep)


def high_samples() -> list[Sample]:
    """At least one sample per high-confidence kind, in the shapes agents meet them."""
    _RNG.seed(1)
    rsa, openssh, ec = pem("RSA PRIVATE KEY"), pem("OPENSSH PRIVATE KEY"), pem("EC PRIVATE KEY")
    pkcs8 = pem("PRIVATE KEY", newline="\\n")
    cut_key = "-----BEGIN " + "DSA PRIVATE KEY-----\n" + rand(B64, 64) + "\n" + rand(B64, 40)
    ghp = "gh" + "p_" + rand(ALNUM, 36)
    fine = "github" + "_pat_" + rand(ALNUM, 22) + "_" + rand(ALNUM, 59)
    slack_hook = "T" + rand(UPPER_DIGITS, 8) + "/B" + rand(UPPER_DIGITS, 8) + "/" + rand(ALNUM, 24)
    return [
        _sample("private_key", "$ cat ~/.ssh/id_rsa\n{s}\n$ ", rsa),
        _sample("private_key", "key file:\n{s}\n", openssh),
        _sample("private_key", "{s}", ec),
        _sample("private_key", '"private_key": "{s}\\n",', pkcs8, '"private_key": "'),
        _sample("private_key", "{s}", pem("PGP PRIVATE KEY BLOCK")),
        _sample("private_key", "{s}", pem("ENCRYPTED PRIVATE KEY")),
        _sample("private_key", "output cut:\n{s}", cut_key),
        _sample(
            "aws_access_key_id", "aws_access_key_id = {s}", "AK" + "IA" + rand(UPPER_DIGITS, 16)
        ),
        _sample("aws_access_key_id", '"AccessKeyId": "{s}"', "AS" + "IA" + rand(UPPER_DIGITS, 16)),
        _sample(
            "aws_secret_access_key",
            "[default]\naws_secret_access_key = {s}\n",
            rand(ALNUM + "/+", 40),
            "aws_secret_access_key = ",
        ),
        _sample("aws_secret_access_key", '"SecretAccessKey": "{s}",', rand(ALNUM + "/+", 40)),
        _sample("github_token", "export GITHUB_TOKEN={s}", ghp, "export GITHUB_TOKEN="),
        _sample("github_token", "token: {s}", "gh" + "o_" + rand(ALNUM, 36)),
        _sample("github_token", "Authorization: token {s}", "gh" + "s_" + rand(ALNUM, 36)),
        _sample("github_token", "{s}", "gh" + "u_" + rand(ALNUM, 36)),
        _sample("github_token", "pat={s}", fine),
        _sample("gitlab_token", "PRIVATE-TOKEN: {s}", "gl" + "pat-" + rand(B64URL, 20)),
        _sample(
            "slack_token",
            "SLACK_BOT_TOKEN={s}",
            "xo"
            + "xb-"
            + rand("0123456789", 12)
            + "-"
            + rand("0123456789", 13)
            + "-"
            + rand(ALNUM, 24),
        ),
        _sample(
            "slack_token",
            "{s}",
            "xo" + "xp-" + "-".join(rand("0123456789", 12) for _ in range(3)) + "-" + rand(HEX, 32),
        ),
        _sample(
            "slack_webhook",
            "curl -X POST https://hooks.slack.com/services/{s}",
            slack_hook,
            "https://hooks.slack.com/services/",
        ),
        _sample("stripe_secret_key", "Stripe.api_key = '{s}'", "sk" + "_live_" + rand(ALNUM, 24)),
        _sample("stripe_secret_key", "{s}", "rk" + "_live_" + rand(ALNUM, 24)),
        _sample("stripe_secret_key", "STRIPE_KEY={s}", "sk" + "_test_" + rand(ALNUM, 24)),
        _sample("stripe_webhook_secret", "{s}", "wh" + "sec_" + rand(ALNUM, 32)),
        _sample(
            "openai_api_key",
            "OPENAI_API_KEY={s}",
            "sk-" + "proj-" + rand(B64URL, 48) + "T3" + rand(B64URL, 60),
        ),
        _sample("openai_api_key", "{s}", "sk-" + "svcacct-" + rand(B64URL, 80)),
        _sample(
            "openai_api_key",
            "key: {s}",
            "sk-" + rand(ALNUM, 20) + "T3Blbk" + "FJ" + rand(ALNUM, 20),
        ),
        _sample(
            "anthropic_api_key", "x-api-key: {s}", "sk-" + "ant-api03-" + rand(B64URL, 93) + "AA"
        ),
        _sample("anthropic_api_key", "{s}", "sk-" + "ant-admin01-" + rand(B64URL, 93) + "AA"),
        _sample("google_api_key", "?key={s}&q=1", "AI" + "za" + rand(B64URL, 35)),
        _sample(
            "google_oauth_client_secret",
            '"client_secret": "{s}"',
            "GOC" + "SPX-" + rand(B64URL, 28),
        ),
        _sample("huggingface_token", "HF_TOKEN={s}", "h" + "f_" + rand(ALNUM, 34)),
        _sample("npm_token", "//registry.npmjs.org/:_authToken={s}", "np" + "m_" + rand(ALNUM, 36)),
        _sample(
            "sendgrid_api_key",
            "{s}",
            "S" + "G." + rand(B64URL, 22) + "." + rand(B64URL, 43),
        ),
        _sample("jwt", "cookie: session={s}; Path=/", jwt()),
        _sample(
            "url_password",
            "DATABASE_URL=postgres://app_user:{s}@db.internal:5432/app",
            rand(ALNUM, 18),
            "postgres://app_user:",
            "@db.internal:5432/app",
        ),
        _sample("url_password", "redis://:{s}@cache:6379/0", rand(ALNUM, 16), "@cache:6379/0"),
        _sample(
            "url_password",
            "git clone https://bob:{s}@git.example.org/r.git",
            rand(ALNUM, 12),
            "bob:",
        ),
        _sample("password", "password={s}", rand(ALNUM, 6) + "7!", "password="),
        _sample(
            "password", '{{"user": "amy", "password": "{s}"}}', rand(ALNUM, 14), '"password": "'
        ),
        _sample("password", "db:\n  passwd: {s}\n", "h" + rand(ALNUM, 9) + "2", "passwd: "),
        _sample("password", 'DB_PASSWORD="{s}"', rand(ALNUM + "!@#", 12), "DB_PASSWORD="),
        _sample(
            "password", "mysqldump --password {s} app", "Q" + rand(ALNUM, 10) + "9", "--password "
        ),
        _sample(
            "bearer_token", "Authorization: Bearer {s}", rand(B64URL, 40), "Authorization: Bearer "
        ),
        _sample(
            "basic_auth",
            "Authorization: Basic {s}",
            base64.b64encode(("admin:" + rand(ALNUM, 12)).encode()).decode(),
        ),
    ]


def medium_samples() -> list[Sample]:
    """Samples only the opt-in (medium) patterns find."""
    _RNG.seed(2)
    return [
        _sample("generic_secret", "MY_SERVICE_SECRET={s}", rand(ALNUM, 32), "MY_SERVICE_SECRET="),
        _sample("generic_secret", 'internal_api_key: "{s}"', rand(HEX, 40)),
        _sample("generic_secret", "export DEPLOY_TOKEN='{s}'", rand(B64URL, 24)),
        _sample("stripe_publishable_key", "{s}", "pk" + "_live_" + rand(ALNUM, 24)),
    ]


def look_alikes() -> list[str]:
    """Texts that resemble secrets and must come out unchanged at high confidence."""
    _RNG.seed(3)
    return [
        "commit " + rand(HEX, 40) + "\nAuthor: Dev <dev@example.com>",
        "request id 3f1c2a9e-8b7d-4c6e-9f0a-1b2c3d4e5f60 completed",
        "sha256:" + rand(HEX, 64),
        "Please enter your password to continue. The password field is required.",
        "The password: see the vault. Forgot password? Reset it from settings.",
        "Run the task-runner; the risk-assessment and desk-" + rand(ALNUM, 48) + " job.",
        "password=<your password>",
        "password=${PASSWORD}",
        "PASSWORD: $DB_PASSWORD",
        'password = "********"',
        "password: str = Field(..., min_length=8)",
        'password = os.environ["DB_PASSWORD"]',
        "login(user, password=password)",
        "self.password = password",
        "min_password_length = 8",
        "https://example.com/search?q=tokens&page=2",
        "ssh://git@github.com:22/org/repo.git and git@github.com:org/repo.git",
        "https://user@host.example.com/path",
        "postgres://user:<password>@localhost/db",
        "mysql://root:${MYSQL_PASSWORD}@db/app",
        "tool call toolu_01A09q90qw90lq917835lq9 and msg_01XFDUDYJgAACzvnptvVoYEL",
        "short ids: call_abc123, ghp_1234, sk-abc, AKIA1234",
        "gh" + "p_" + "x" * 36,
        "AK" + "IA" + "IOSFODNN7EXAMPLE",
        "max_tokens=4096, tokenizer: cl100k_base",
        "Send the bearer token in the Authorization header.",
        "Authorization: Bearer YOUR_ACCESS_TOKEN_HERE",
        "token = get_token()",
        "eyJhbGciOi...truncated",
        "data:image/png;base64,"
        + base64.b64encode(bytes(_RNG.randrange(256) for _ in range(600))).decode(),
    ]
