from __future__ import annotations

import copy
import dataclasses
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.errors import InvalidInputError
from contextstore.core.overlays import UpdateKind, UpdateMode, text_hash
from contextstore.processors import SecretMasker, mask_message, mask_text, mask_value
from contextstore.processors import secrets as secrets_module
from contextstore.processors.base import message_blocks
from contextstore.processors.secret_patterns import PATTERNS, shannon_entropy

from ._corpus import ALNUM, B64URL, HEX, Sample, high_samples, look_alikes, medium_samples

HIGH = high_samples()
MEDIUM = medium_samples()
LOOK_ALIKES = look_alikes()


def test_corpus_is_large_and_covers_every_high_kind() -> None:
    assert len(HIGH) + len(MEDIUM) >= 30
    high_kinds = {p.kind for p in PATTERNS if p.confidence == "high"}
    assert high_kinds - {s.kind for s in HIGH} <= {
        "aws_session_token",
        "google_oauth_token",
        "pypi_token",
        "azure_storage_key",
    }


@pytest.mark.parametrize("sample", HIGH, ids=lambda s: s.kind)
def test_high_confidence_samples_are_masked(sample: Sample) -> None:
    masked, findings = mask_text(sample.text)
    assert sample.secret not in masked
    assert f"[REDACTED:{sample.kind}]" in masked
    assert sample.kind in {f.kind for f in findings}
    for kept in sample.keep:
        assert kept in masked
    for finding in findings:
        assert sample.text[finding.start : finding.end] in sample.secret or (
            sample.secret in sample.text[finding.start : finding.end]
        )


@pytest.mark.parametrize("sample", MEDIUM, ids=lambda s: s.kind)
def test_medium_samples_need_opt_in(sample: Sample) -> None:
    assert mask_text(sample.text) == (sample.text, [])
    masked, findings = mask_text(sample.text, confidence="medium")
    assert sample.secret not in masked
    assert [f.kind for f in findings] == [sample.kind]
    for kept in sample.keep:
        assert kept in masked


@pytest.mark.parametrize("text", LOOK_ALIKES, ids=lambda t: t[:30])
def test_look_alikes_are_left_alone(text: str) -> None:
    assert mask_text(text) == (text, [])


@pytest.mark.parametrize(
    "text",
    [t for t in LOOK_ALIKES if "EXAMPLE" not in t and "get_token" not in t],
    ids=lambda t: t[:30],
)
def test_look_alikes_survive_medium_confidence(text: str) -> None:
    assert mask_text(text, confidence="medium") == (text, [])


def test_url_password_keeps_user_and_host() -> None:
    sample = next(s for s in HIGH if s.text.startswith("DATABASE_URL"))
    masked, _ = mask_text(sample.text)
    assert masked == "DATABASE_URL=postgres://app_user:[REDACTED:url_password]@db.internal:5432/app"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("redis://:s3cr3t@cache:6379/0", "redis://:[REDACTED:url_password]@cache:6379/0"),
        ("amqp://guest:guest@mq/", "amqp://guest:[REDACTED:url_password]@mq/"),
        ("postgresql://app:pass@db/app", "postgresql://app:[REDACTED:url_password]@db/app"),
        ("mysql://root:1234567@db/app", "mysql://root:[REDACTED:url_password]@db/app"),
    ],
)
def test_a_url_password_is_masked_however_simple(text: str, masked: str) -> None:
    assert mask_text(text)[0] == masked


@pytest.mark.parametrize(
    "text",
    [
        "http://localhost:8080@proxy",
        "postgres://app:ab@db/app",
        "postgres://app:xxxx@db/app",
        "postgres://app:{password}@db/app",
    ],
)
def test_a_port_or_placeholder_in_a_urls_password_place_stays(text: str) -> None:
    assert mask_text(text, confidence="medium") == (text, [])


def test_several_secrets_in_one_text_keep_spans_of_the_original() -> None:
    first, second = HIGH[11], HIGH[30]
    text = f"a {first.text}\nb {second.text}\n"
    masked, findings = mask_text(text)
    assert first.secret not in masked and second.secret not in masked
    assert [text[f.start : f.end] for f in findings] == [first.secret, second.secret]


def test_unknown_confidence_is_refused() -> None:
    with pytest.raises(InvalidInputError):
        mask_text("x", confidence="low")


def test_entropy() -> None:
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abcd") == pytest.approx(2.0)


FRAGMENTS = [s.text for s in HIGH + MEDIUM] + LOOK_ALIKES + ["\n", " ", "=", ":", '"', "@"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=6), st.text(max_size=40))
def test_masking_is_idempotent(parts: list[str], noise: str) -> None:
    text = noise.join(parts)
    for confidence in ("high", "medium"):
        once, _ = mask_text(text, confidence=confidence)
        assert mask_text(once, confidence=confidence) == (once, [])


def test_mask_value_walks_nested_inputs_and_keys() -> None:
    token = HIGH[11].secret
    value = {"cmd": f"echo {token}", "env": {"DB_PASSWORD": "hunter2x"}, "n": [1, token]}
    assert mask_value(value) == {
        "cmd": "echo [REDACTED:github_token]",
        "env": {"DB_PASSWORD": "[REDACTED:password]"},
        "n": [1, "[REDACTED:github_token]"],
    }
    assert mask_value({"password": "${PASSWORD}"}) == {"password": "${PASSWORD}"}


def _message_with_secrets(token: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": f"my token is {token}"},
            {"type": "thinking", "thinking": f"the user said {token}", "signature": "sig"},
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": f"gh {token}"}},
            {"type": "tool_result", "tool_use_id": "t1", "content": f"ok {token}"},
            {
                "type": "tool_result",
                "tool_use_id": "t2",
                "content": [
                    {"type": "text", "text": "first"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="},
                    },
                    {"type": "text", "text": f"later {token}"},
                ],
            },
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": f"doc {token}"},
            },
        ],
    }


def test_mask_message_masks_a_deep_copy_and_leaves_thinking() -> None:
    token = HIGH[11].secret
    message = _message_with_secrets(token)
    before = copy.deepcopy(message)
    masked = mask_message(message)
    assert message == before
    dumped = json.dumps(masked)
    assert dumped.count(token) == 1
    assert masked["content"][1] == message["content"][1]
    assert masked["content"][4]["content"][1] == message["content"][4]["content"][1]
    assert mask_message({"role": "user", "content": token})["content"] == "[REDACTED:github_token]"


def test_secret_masker_proposals() -> None:
    token = HIGH[11].secret
    message = _message_with_secrets(token)
    before = copy.deepcopy(message)
    view = [(0, {"role": "user", "content": "task"}), (7, message)]
    updates = SecretMasker().propose(view)
    assert message == before
    by_block = {u.block_idx: u for u in updates}
    assert set(by_block) == {0, 2, 3, 4, 5}
    assert all(u.kind == UpdateKind.PROCESSOR and u.source == "secret_mask" for u in updates)
    assert all(u.message_idx == 7 for u in updates)
    assert by_block[0].text == "my token is [REDACTED:github_token]"
    assert by_block[0].base_hash == text_hash(f"my token is {token}")
    assert by_block[0].metadata == {"secrets": {"github_token": 1}}
    assert by_block[2].mode == UpdateMode.TOOL_INPUT
    assert json.loads(by_block[2].text) == {"command": "gh [REDACTED:github_token]"}
    assert by_block[3].mode == UpdateMode.TEXT
    assert by_block[4].mode == UpdateMode.BLOCK
    assert "later [REDACTED:github_token]" in by_block[4].text
    assert "[image omitted: image/png" in by_block[4].text
    assert by_block[5].mode == UpdateMode.BLOCK  # a plain-text document, as a text block
    assert by_block[5].text == "doc [REDACTED:github_token]"
    assert all(token not in u.text for u in updates)


def test_secret_masker_string_content_and_nothing_to_do() -> None:
    token = HIGH[11].secret
    masker = SecretMasker()
    updates = masker.propose([(3, {"role": "user", "content": f"x {token}"})])
    assert [(u.message_idx, u.block_idx, u.text) for u in updates] == [
        (3, 0, "x [REDACTED:github_token]")
    ]
    assert masker.propose([(0, {"role": "user", "content": LOOK_ALIKES[0]})]) == []


def test_secret_masker_config_is_stable_and_json() -> None:
    assert SecretMasker().config() == SecretMasker().config()
    json.dumps(SecretMasker(confidence="medium").config())
    assert SecretMasker().config() != SecretMasker(confidence="medium").config()
    with pytest.raises(InvalidInputError):
        SecretMasker(confidence="paranoid")


@pytest.mark.parametrize(
    ("alphabet", "length"), [(ALNUM, 16), (ALNUM, 40), (HEX, 32), (B64URL, 24)]
)
def test_generic_secrets_are_found_whatever_their_draw(alphabet: str, length: int) -> None:
    rng = random.Random(length)
    for _ in range(300):
        value = "".join(rng.choice(alphabet) for _ in range(length))
        if not any(c.isdigit() for c in value):
            continue
        masked, _ = mask_text(f"API_TOKEN={value}", confidence="medium")
        assert masked == "API_TOKEN=[REDACTED:generic_secret]", value


@pytest.mark.parametrize(
    "text",
    [
        "api_key = settings.OPENAI_API_KEY",
        "auth_token: ${{ secrets.DEPLOY_TOKEN }}",
        "SECRET_KEY = get_random_secret_key()",
        "csrf_token = '{{ csrf_token }}'",
        "next_page_token: aaaaaaaaaaaaaaaaaaaaaaaa",
        "token_path = ~/.config/gh/hosts.yml",
    ],
)
def test_generic_look_alikes(text: str) -> None:
    assert mask_text(text, confidence="medium") == (text, [])


UNHINTED = tuple(dataclasses.replace(p, hints=()) for p in PATTERNS)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=5), st.text(max_size=30))
def test_hints_only_skip_scans_that_could_not_match(parts: list[str], noise: str) -> None:
    """The substring hints are a speed-up only: masking with and without them agrees."""
    text = noise.join(parts)
    for confidence in ("high", "medium"):
        assert mask_text(text, confidence=confidence) == mask_text(
            text, confidence=confidence, patterns=UNHINTED
        )


@pytest.mark.parametrize("sample", HIGH + MEDIUM, ids=lambda s: s.kind)
def test_every_corpus_sample_contains_a_hint_of_its_kind(sample: Sample) -> None:
    lowered = sample.text.lower()
    assert any(p.may_match(lowered) for p in PATTERNS if p.kind == sample.kind)


def test_every_hint_reads_the_same_inside_json() -> None:
    """The masker skips a tool input whose JSON holds no hint: that is sound only while
    each hint is lower-case and written the same in a text and in its JSON."""
    for pattern in PATTERNS:
        for hint in pattern.hints:
            assert hint == hint.lower(), (pattern.kind, hint)
            assert json.dumps(hint, ensure_ascii=False) == f'"{hint}"', (pattern.kind, hint)


_BLOCK_PARTS = st.lists(st.sampled_from(FRAGMENTS), max_size=4).map("".join)


def _blocks(text: str, other: str) -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": text},
        {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": other, "n": 1}},
        {"type": "tool_result", "tool_use_id": "t1", "content": other},
        {
            "type": "tool_result",
            "tool_use_id": "t2",
            "content": [{"type": "text", "text": text}, {"type": "text", "text": other}],
        },
    ]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_BLOCK_PARTS, _BLOCK_PARTS, st.booleans()), min_size=1, max_size=4))
def test_the_maskers_proposals_equal_unhinted_block_by_block_masking(
    messages: list[tuple[str, str, bool]],
) -> None:
    """The proposals equal those of asking block by block, without hints (every pattern
    run on every block)."""
    view = [
        (i, {"role": "user", "content": text if plain else _blocks(text, other)})
        for i, (text, other, plain) in enumerate(messages)
    ]
    for confidence in ("high", "medium"):
        unhinted = SecretMasker(confidence=confidence, patterns=UNHINTED)
        block_by_block = [
            update
            for m, message in view
            for b, block in message_blocks(message)
            if (update := unhinted._propose_block(m, b, block)) is not None
        ]
        assert SecretMasker(confidence=confidence).propose(view) == block_by_block


_GITHUB = next(s for s in HIGH if s.kind == "github_token")
_PLAIN_WORDS = ["hunter22", "hello there", "src/a.py", "Zx9Qw2Lm8Rt4Vb7Np3Ks", "", "\n"]
"""Texts holding no hint: a password-like value, prose, a path, a high-entropy value."""
_TEXTS = st.one_of(
    st.sampled_from(_PLAIN_WORDS),
    st.sampled_from(FRAGMENTS),
    st.builds(
        lambda wide, text: wide + text, st.sampled_from(["İ", "é", "\u212a", "ß"]), _BLOCK_PARTS
    ),
)
_KEYS = st.sampled_from(["command", "path", "password", "DB_PASSWORD", "api_key", "token"])
_INPUTS = st.one_of(
    st.dictionaries(_KEYS, _TEXTS, max_size=3),
    st.dictionaries(_KEYS, st.one_of(st.integers(), st.booleans(), st.none()), max_size=2),
    st.builds(lambda key, value: {key: {"inner": value}}, _KEYS, _TEXTS),
    st.builds(lambda value: {1: value}, _TEXTS),
    st.builds(lambda values: {"args": values}, st.lists(_TEXTS, max_size=2)),
    _TEXTS,
)
_RESULT_ITEMS = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, _TEXTS),
        st.just({"type": "image", "source": {"type": "base64", "data": "aGk="}}),
        st.just("junk"),
        st.builds(
            lambda t: {"type": "text", "text": "ok", "citations": [{"cited_text": t}]}, _TEXTS
        ),
        st.builds(lambda t: {"type": "image", "source": {"type": "url", "url": t}}, _TEXTS),
    ),
    max_size=3,
)
_SOURCES = st.one_of(
    st.builds(lambda t: {"type": "url", "url": t}, _TEXTS),
    st.builds(lambda t: {"type": "text", "media_type": "text/plain", "data": t}, _TEXTS),
    st.builds(lambda t: {"type": "content", "content": t}, _TEXTS),
    st.builds(lambda t: {"type": "content", "content": [{"type": "text", "text": t}]}, _TEXTS),
    st.just({"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}),
)
_SIDE_BLOCKS = st.one_of(
    st.builds(lambda s, t: {"type": "document", "source": s, "title": t}, _SOURCES, _TEXTS),
    st.builds(lambda s, t: {"type": "document", "source": s, "context": t}, _SOURCES, _TEXTS),
    st.builds(lambda s: {"type": "image", "source": s}, _SOURCES),
    st.builds(
        lambda a, b: {"type": "text", "text": a, "citations": [{"cited_text": b}]}, _TEXTS, _TEXTS
    ),
)
_MASKER_BLOCKS = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _TEXTS),
    st.builds(lambda t: {"type": "tool_result", "tool_use_id": "t", "content": t}, _TEXTS),
    st.builds(lambda i: {"type": "tool_result", "tool_use_id": "t", "content": i}, _RESULT_ITEMS),
    st.builds(lambda i: {"type": "tool_use", "id": "t", "name": "bash", "input": i}, _INPUTS),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "s"}, _TEXTS),
    _SIDE_BLOCKS,
    st.sampled_from([{"type": "tool_use", "id": "t"}, {"type": "text", "text": None}, "junk"]),
)
_MASKER_VIEWS = st.lists(
    st.one_of(_TEXTS, st.lists(_MASKER_BLOCKS, max_size=4)), min_size=1, max_size=4
).map(lambda contents: [(i, {"role": "user", "content": c}) for i, c in enumerate(contents)])
_NO_PASSWORD_PATTERN = tuple(p for p in PATTERNS if p.kind != "password")


def _assert_batched_equals_block_by_block(view: list[Any], batch_chars: int) -> None:
    before = copy.deepcopy(view)
    original = secrets_module.BATCH_CHARS
    secrets_module.BATCH_CHARS = batch_chars
    try:
        for confidence in ("high", "medium"):
            for patterns in (PATTERNS, _NO_PASSWORD_PATTERN):
                unhinted = tuple(dataclasses.replace(p, hints=()) for p in patterns)
                reference = SecretMasker(confidence=confidence, patterns=unhinted)
                masker = SecretMasker(confidence=confidence, patterns=patterns)
                assert masker.propose(view) == reference._propose_each(view)
    finally:
        secrets_module.BATCH_CHARS = original
    assert view == before


@settings(max_examples=300, deadline=None)
@given(_MASKER_VIEWS, st.sampled_from([1 << 20, 64, 1]))
def test_the_batched_hint_scan_proposes_what_block_by_block_masking_does(
    view: list[Any], batch_chars: int
) -> None:
    """One scan over many blocks' texts (in batches of any size) flags every block that
    masking block by block, without hints, would rewrite."""
    _assert_batched_equals_block_by_block(view, batch_chars)


def _tool(value: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": "t", "name": "bash", "input": value}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


@pytest.mark.parametrize(
    "blocks",
    [
        [_tool({"password": "hunter22"}), _tool({"DB_PASSWORD": "hunter22", "n": 1})],
        [_tool({"api_key": "Zx9Qw2Lm8Rt4Vb7Np3Ks"})],
        [_tool({"env": {"TOKEN": _GITHUB.secret}}), _tool({"args": [_GITHUB.text]})],
        [_tool({1: _GITHUB.text}), _tool(_GITHUB.text), _tool([_GITHUB.text])],
        [{"type": "tool_result", "content": [_text("ok"), "junk", _text(_GITHUB.text)]}],
        [{"type": "tool_result", "content": [_text(_GITHUB.text), _text(_GITHUB.text)]}],
        [_text("İé" * 30), _text(f"see {_GITHUB.secret}"), _text("after")],
        [_text("\u212a" * 30), _text(f"see {_GITHUB.secret}"), _text("after")],
        [_text(_GITHUB.text), _tool({"password": "hunter22"}), _text(_GITHUB.text)],
    ],
    ids=[
        "password key",
        "secret key at medium",
        "nested input",
        "int key, string and list inputs",
        "later result item",
        "two items, one block",
        "lower-casing moves offsets",
        "one byte per character",
        "forced block between texts",
    ],
)
@pytest.mark.parametrize("batch_chars", [1 << 20, 1])
def test_each_rule_of_the_batched_hint_scan(blocks: list[Any], batch_chars: int) -> None:
    view = [(0, {"role": "user", "content": "task"}), (3, {"role": "user", "content": blocks})]
    _assert_batched_equals_block_by_block(view, batch_chars)


class _CountedRegex:
    """A pattern's regex that counts its searches."""

    def __init__(self, regex: Any) -> None:
        self.regex = regex
        self.searches = 0

    def search(self, text: str, position: int = 0) -> Any:
        self.searches += 1
        return self.regex.search(text, position)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.regex, name)


@pytest.mark.parametrize(
    ("kind", "unit"),
    [
        ("slack_token", "xoxb-0000-xxxxxxxxxxxx-"),
        ("gitlab_token", "glpat-aaaaaaaaaaaaaaaaaaaaaaa-"),
    ],
)
def test_a_long_run_the_validator_refuses_is_scanned_once(kind: str, unit: str) -> None:
    # Retrying one character later matched the same run to its end again: 100 KB of such
    # runs took seconds (quadratic). The searches are counted, not timed.
    from contextstore.processors.secret_text import find_secrets

    text = unit * (100_000 // len(unit))
    counted = []
    for pattern in PATTERNS:
        if pattern.kind == kind:
            regex = _CountedRegex(pattern.regex)
            counted.append(regex)
            pattern = dataclasses.replace(pattern, regex=regex)
            assert find_secrets(text, patterns=[pattern]) == []
    assert counted and all(regex.searches <= 3 for regex in counted)
    real = unit.split("-")[0] + "-" + "1234567890-" + "Zq8" * 10
    assert mask_text(text + " " + real)[0] == text + f" [REDACTED:{kind}]"


@pytest.mark.parametrize(
    "wrapped",
    [
        lambda s: json.dumps({"content": f"first line\n{s}\n"}),  # JSON-encoded text: \n
        lambda s: f"https://example.com/cb?next=%2Fhome%3Ftoken%3D{s}",  # URL-encoded
        lambda s: json.dumps(f"\t{s}"),
    ],
    ids=["json escape", "url encoding", "tab escape"],
)
def test_a_secret_right_after_an_escape_is_masked(wrapped: Any) -> None:
    token = "ghp_R8mKq2Lx9Vb4Nw7Tz1Yc6Hd3Jf5Gs0Pa8Qe2"
    masked, _ = mask_text(wrapped(token))
    assert token not in masked and "[REDACTED:github_token]" in masked
    assert mask_text(masked)[0] == masked


def test_secrets_known_by_their_key_or_flag_in_a_tool_input_are_masked() -> None:
    # A value with no text around it: its dict key or the flag before it names it.
    value = {
        "argv": ["mysql", "-u", "root", "--password", "Hunter2024x", "--password", "<password>"],
        "env": {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Kd3Lm2P"},
        "headers": {"Authorization": "Basic dXNlcjpIdW50ZXIyMDI0IQ=="},
        "plain": {"secret_santa": "Alice", "path": "src/secrets.py"},
    }
    assert mask_value(value) == {
        "argv": [*value["argv"][:4], "[REDACTED:password]", "--password", "<password>"],
        "env": {"AWS_SECRET_ACCESS_KEY": "[REDACTED:aws_secret_access_key]"},
        "headers": {"Authorization": "Basic [REDACTED:basic_auth]"},
        "plain": {"secret_santa": "Alice", "path": "src/secrets.py"},
    }
    header = '{"Authorization": "Basic dXNlcjpIdW50ZXIyMDI0IQ=="}'
    assert mask_text(header)[0] == '{"Authorization": "Basic [REDACTED:basic_auth]"}'


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("PASSWORD_RESET_TIMEOUT=259200", False),  # Django: a setting about passwords
        ("password_reset_timeout_days = 3600", False),
        ("ansible_become_password: !vault |", False),  # a YAML tag, the vault follows
        ("MYSQL_PASSWORD=20240817", True),  # a number is a password where the name says so
        ("db_password_2=99887766", True),
        ("DB_PASSWORD=s3cr3t99", True),
    ],
)
def test_settings_about_passwords_are_not_passwords(text: str, masked: bool) -> None:
    assert ("[REDACTED:password]" in mask_text(text)[0]) is masked


@pytest.mark.parametrize("on_write", [False, True], ids=["render", "on write"])
def test_a_search_result_in_a_tool_result_is_masked(on_write: bool) -> None:
    from contextstore import ContextStore

    token = "ghp_R8mKq2Lx9Vb4Nw7Tz1Yc6Hd3Jf5Gs0Pa8Qe2"
    found = {
        "type": "search_result",
        "source": "https://wiki.example.com/setup",
        "title": "Setup notes",
        "content": [{"type": "text", "text": f"export GITHUB_TOKEN={token}"}],
    }
    with ContextStore.open(":memory:", mask_secrets_on_write=on_write) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "find the setup notes")
        call = {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "setup"}}
        store.append(cid, "assistant", [call])
        result = {"type": "tool_result", "tool_use_id": "t1", "content": [found]}
        store.append(cid, "user", [result])
        shown = str(store.render(cid, format="anthropic"))
        assert token not in shown and "[REDACTED:github_token]" in shown
        assert (token in str(store.messages(cid))) is not on_write


def _found(text: str, *, title: str = "Setup notes", citations: Any = None) -> dict[str, Any]:
    """A search result, as Anthropic's SDK types it (checked against them)."""
    from anthropic.types import SearchResultBlockParam
    from pydantic import TypeAdapter

    part: dict[str, Any] = {"type": "text", "text": text}
    if citations is not None:
        part["citations"] = citations
    block = {
        "type": "search_result",
        "source": "https://wiki.example.com/setup",
        "title": title,
        "content": [part],
    }
    TypeAdapter(SearchResultBlockParam).validate_python(block)
    return block


def _search_conversation(store: Any, items: list[dict[str, Any]]) -> str:
    cid: str = store.create_conversation().id
    store.append(cid, "user", "find the setup notes")
    call = {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "setup"}}
    store.append(cid, "assistant", [call])
    store.append(cid, "user", [{"type": "tool_result", "tool_use_id": "t1", "content": items}])
    return cid


def _result_text(format: str, messages: list[dict[str, Any]]) -> str:
    """The tool result's text, as ``format`` sends it."""
    if format == "openai":
        (tool,) = [m for m in messages if m["role"] == "tool"]
        return str(tool["content"])
    (output,) = [
        part["functionResponse"]["response"]["output"]
        for content in messages
        for part in content["parts"]
        if "functionResponse" in part
    ]
    return str(output)


@pytest.mark.parametrize("format", ["openai", "gemini"])
def test_a_masked_search_result_reads_as_the_formats_send_an_unmasked_one(format: str) -> None:
    """The masker showed a search result holding a secret as its source, title and text
    on bare lines, where OpenAI and Gemini get ``[Search result: <title>]`` and
    ``Source: <source>`` for one without: the same search results reached the model in two
    shapes, and every search result of the tool result lost its labels with the one that
    held the secret. Now the masked view is what the format sends for the same results with
    the marker in place of the secret."""
    from contextstore import ContextStore

    token = "ghp_R8mKq2Lx9Vb4Nw7Tz1Yc6Hd3Jf5Gs0Pa8Qe2"
    with ContextStore.open(":memory:") as store:
        secret = _search_conversation(
            store, [_found("Plain notes."), _found(f"export GITHUB_TOKEN={token}")]
        )
        marked = _search_conversation(
            store,
            [_found("Plain notes."), _found("export GITHUB_TOKEN=[REDACTED:github_token]")],
        )
        shown = _result_text(format, store.render(secret, format=format))
        assert shown == _result_text(format, store.render(marked, format=format))
    assert shown == (
        "[Search result: Setup notes]\nSource: https://wiki.example.com/setup\nPlain notes."
        "\n\n[Search result: Setup notes]\nSource: https://wiki.example.com/setup\n"
        "export GITHUB_TOKEN=[REDACTED:github_token]"
    )


def test_the_masker_shows_a_search_result_as_the_renderers_do() -> None:
    from contextstore.core.overlays import search_result_text

    token = "ghp_R8mKq2Lx9Vb4Nw7Tz1Yc6Hd3Jf5Gs0Pa8Qe2"
    found = _found(f"export GITHUB_TOKEN={token}", title="Setup")
    view = [
        (0, {"role": "user", "content": "find"}),
        (
            1,
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "s", "input": {}}],
            },
        ),
        (
            2,
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [found]}],
            },
        ),
    ]
    (update,) = SecretMasker().propose(view)
    masked = _found("export GITHUB_TOKEN=[REDACTED:github_token]", title="Setup")
    assert update.mode == UpdateMode.BLOCK
    assert update.text == search_result_text(masked)
    assert update.metadata["secrets"] == {"github_token": 1}


def test_a_secret_in_a_search_results_citation_is_not_sent() -> None:
    """The masker read a search result's source, title and texts only: a secret quoted in
    a citation of its text reached the Anthropic format as stored."""
    from contextstore import ContextStore

    token = "ghp_R8mKq2Lx9Vb4Nw7Tz1Yc6Hd3Jf5Gs0Pa8Qe2"
    citation = {
        "type": "search_result_location",
        "cited_text": f"GITHUB_TOKEN={token}",
        "source": "https://wiki.example.com/setup",
        "title": "Setup notes",
        "search_result_index": 0,
        "start_block_index": 0,
        "end_block_index": 0,
    }
    with ContextStore.open(":memory:") as store:
        cid = _search_conversation(store, [_found("See the notes.", citations=[citation])])
        for format in ("anthropic", "openai", "gemini"):
            assert token not in json.dumps(store.render(cid, format=format)), format
        (shown,) = [
            block["content"]
            for message in store.render(cid, format="anthropic")
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        assert shown == (
            "[Search result: Setup notes]\nSource: https://wiki.example.com/setup\nSee the notes."
        )


def test_a_request_prepared_with_the_former_masked_form_rebuilds_as_sent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The masker's rewrite is stored with the request (a ``context_updates`` row), and a
    rebuild reads it back without running the masker: a request prepared while the masker
    showed another form of a search result rebuilds byte for byte, and later requests of
    that conversation keep the form it was sent in."""
    from contextstore import ContextStore

    token = "ghp_R8mKq2Lx9Vb4Nw7Tz1Yc6Hd3Jf5Gs0Pa8Qe2"
    former = (
        "https://wiki.example.com/setup\nSetup notes\nexport GITHUB_TOKEN=[REDACTED:github_token]"
    )
    with ContextStore.open(tmp_path / "a.db") as store:
        cid = _search_conversation(store, [_found(f"export GITHUB_TOKEN={token}")])
        with monkeypatch.context() as patched:
            patched.setattr(
                secrets_module,
                "_search_result_shown",
                lambda item: (former.replace("[REDACTED:github_token]", token), []),
            )
            old = store.prepare_request(cid, format="openai")
        assert old.request_id is not None
        assert _result_text("openai", old.payload["messages"]) == former
        store.prepare_cache.clear()
        assert store.request_payload(cid, old.request_id) == old.payload
        store.append(cid, "assistant", "Found them.")
        store.append(cid, "user", "Thanks.")
        later = store.prepare_request(cid, format="openai")
        assert _result_text("openai", later.payload["messages"]) == former


def test_a_masked_search_result_through_the_cli(tmp_path: Any) -> None:
    """What ``request --payload`` and ``show --format`` print for a masked search result."""
    from click.testing import CliRunner

    from contextstore import ContextStore
    from contextstore.cli import cli

    token = "ghp_R8mKq2Lx9Vb4Nw7Tz1Yc6Hd3Jf5Gs0Pa8Qe2"
    db = str(tmp_path / "a.db")
    with ContextStore.open(db) as store:
        cid = _search_conversation(store, [_found(f"export GITHUB_TOKEN={token}")])
        prepared = store.prepare_request(cid, format="gemini")
    expected = (
        "[Search result: Setup notes]\nSource: https://wiki.example.com/setup\n"
        "export GITHUB_TOKEN=[REDACTED:github_token]"
    )
    runner = CliRunner()
    sent = runner.invoke(cli, ["--db", db, "request", cid, str(prepared.request_id), "--payload"])
    assert sent.exit_code == 0, sent.stderr
    assert _result_text("gemini", json.loads(sent.stdout)["contents"]) == expected
    shown = runner.invoke(cli, ["--db", db, "show", cid, "--format", "openai", "--json"])
    assert shown.exit_code == 0, shown.stderr
    assert _result_text("openai", json.loads(shown.stdout)["messages"]) == expected
    shown = runner.invoke(cli, ["--db", db, "show", cid, "--format", "anthropic", "--json"])
    assert shown.exit_code == 0, shown.stderr
    (result,) = json.loads(shown.stdout)["messages"][2]["content"]
    assert result["content"] == expected


def test_a_flat_tool_input_keyed_by_a_secret_name_is_masked_in_the_view() -> None:
    # A flat input takes the masker's quick path, which reads its values: the key must go
    # with them, as the AWS pattern knows the key by its name.
    from contextstore import ContextStore

    key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Kd3Lm2P"
    with ContextStore.open(":memory:") as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "deploy")
        call = {
            "type": "tool_use",
            "id": "t1",
            "name": "env",
            "input": {"AWS_SECRET_ACCESS_KEY": key},
        }
        store.append(cid, "assistant", [call])
        shown = str(store.render(cid, format="anthropic"))
        assert key not in shown and "[REDACTED:aws_secret_access_key]" in shown


_TOKEN = "ghp_R8mKq2Lx9Vb4Nw7Tz1Yc6Hd3Jf5Gs0Pa8Qe2"
_URL_PASSWORD = "s3cretPw9xq"


def _citation(text: str) -> dict[str, Any]:
    return {
        "type": "char_location",
        "cited_text": text,
        "document_index": 0,
        "document_title": "notes",
        "start_char_index": 0,
        "end_char_index": len(text),
    }


def _side_field_messages() -> list[dict[str, Any]]:
    """Messages whose secrets sit in fields beside the blocks' main texts."""
    pdf = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}
    url = f"https://bob:{_URL_PASSWORD}@files.example.com"
    return [
        {
            "role": "user",
            "content": [
                {"type": "document", "source": pdf, "title": f"notes {_TOKEN}"},
                {"type": "document", "source": pdf, "context": f"token {_TOKEN}"},
                {"type": "document", "source": {"type": "url", "url": f"{url}/spec.pdf"}},
                {"type": "image", "source": {"type": "url", "url": f"{url}/shot.png"}},
                {
                    "type": "document",
                    "source": {
                        "type": "content",
                        "content": [{"type": "text", "text": f"export GITHUB_TOKEN={_TOKEN}"}],
                    },
                },
                {"type": "text", "text": "read these"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "ok", "citations": [_citation(_TOKEN)]},
                {"type": "tool_use", "id": "t1", "name": "fetch", "input": {"q": "shot"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [
                        {"type": "text", "text": "fetched", "citations": [_citation(_TOKEN)]},
                        {"type": "image", "source": {"type": "url", "url": f"{url}/b.png"}},
                    ],
                }
            ],
        },
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "thanks"},
    ]


@pytest.mark.parametrize("on_write", [False, True], ids=["render", "on write"])
def test_secrets_beside_a_blocks_main_text_are_masked(on_write: bool) -> None:
    """Titles, contexts, citations, URL sources and content-source texts reach every
    provider's payload: none of them carries a secret there."""
    from contextstore import ContextStore

    with ContextStore.open(":memory:", mask_secrets_on_write=on_write) as store:
        cid = store.create_conversation().id
        store.append_many(cid, _side_field_messages())
        for format in ("anthropic", "openai", "gemini"):
            payload = json.dumps(store.prepare_request(cid, format=format).payload)
            assert _TOKEN not in payload and _URL_PASSWORD not in payload, format
            assert "[REDACTED:github_token]" in payload, format
            assert "[REDACTED:url_password]" in payload, format
        stored = json.dumps(store.messages(cid))
        assert (_TOKEN in stored) is not on_write
        assert (_URL_PASSWORD in stored) is not on_write
        if not on_write:
            counted = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
            assert counted[("url_password", "rewrite")] == 3
            assert counted[("github_token", "rewrite")] == 3  # two citations are dropped


def test_a_secret_beside_the_text_replaces_the_block_by_what_it_shows() -> None:
    messages = _side_field_messages()
    view = list(enumerate(messages))
    updates = {u.address: u for u in SecretMasker().propose(view)}
    assert {u.mode for u in updates.values()} == {UpdateMode.BLOCK}
    assert set(updates) == {(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (2, 0)}
    title = updates[(0, 0)]
    assert title.text.startswith(
        "notes [REDACTED:github_token]\n[document omitted: application/pdf"
    )
    assert updates[(0, 2)].text.startswith(
        "[document omitted: url https://bob:[REDACTED:url_password]@files.example.com/spec.pdf"
    )
    assert updates[(0, 4)].text == "export GITHUB_TOKEN=[REDACTED:github_token]"
    cited = updates[(1, 0)]
    assert (cited.text, cited.metadata) == ("ok", {"secrets": {"github_token": 1}})
    result = updates[(2, 0)]
    assert result.text.startswith("fetched\n\n[image omitted: url https://bob:[REDACTED:")
    assert result.metadata == {"secrets": {"github_token": 1, "url_password": 1}}
    # A clean citation leaves a secret in the text to a TEXT update, which keeps it.
    clean = {"type": "text", "text": f"see {_TOKEN}", "citations": [_citation("plain")]}
    (update,) = SecretMasker().propose([(0, {"role": "assistant", "content": [clean]})])
    assert (update.mode, update.text) == (UpdateMode.TEXT, "see [REDACTED:github_token]")


def test_mask_message_masks_the_fields_beside_the_main_texts() -> None:
    masked = json.dumps([mask_message(m) for m in _side_field_messages()])
    assert _TOKEN not in masked and _URL_PASSWORD not in masked
    assert '"data": "JVBERi0xLjQK"' in masked and '"media_type": "application/pdf"' in masked


@pytest.mark.parametrize("text", [5, None, b"ghp_x", ["password=hunter2"]])
def test_mask_text_refuses_what_is_no_string(text: Any) -> None:
    # It raised AttributeError ('int' object has no attribute 'lower').
    with pytest.raises(InvalidInputError, match=r"^mask_text takes a string, got "):
        mask_text(text)


@pytest.mark.parametrize("message", ["x", None, [{"role": "user", "content": "x"}]])
def test_mask_message_refuses_what_is_no_message_dict(message: Any) -> None:
    # It raised AttributeError ('str' object has no attribute 'items').
    with pytest.raises(InvalidInputError, match=r"^mask_message takes a message dict"):
        mask_message(message)
