"""Every render checked against the providers' official SDK request types.

The goldens (files and fresh renders), the store's prepared payloads and hypothesis-built
conversations must all validate; and the oracle itself must reject what the providers
reject, or a green result would mean nothing.
"""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conversations import MAX_TOKENS, MODELS, SYSTEM, TOOLS, Case, cases
from hypothesis import given, settings
from oracles import sdk_problems
from test_render_properties import paired_conversations

from contextstore import ContextStore
from contextstore.interop import import_gemini
from contextstore.renderers.registry import FORMATS, build_request, validate_provider_payload
from tests.interop.real import gemini_files, params

GOLDEN_DIR = Path(__file__).parent / "golden"


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The SDKs are imported for their types only: any connection attempt fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a test tried to reach the network: {args!r:.80}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


def _format_of(path: Path) -> str:
    return path.name.split(".")[-2]


@pytest.mark.parametrize("path", sorted(GOLDEN_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_every_golden_file_is_a_valid_sdk_request(path: Path) -> None:
    body = json.loads(path.read_text(encoding="utf-8"))
    assert sdk_problems(_format_of(path), body) == []


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.name)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_golden_case_renders_a_valid_sdk_request(case: Case, fmt: str) -> None:
    body = build_request(
        fmt,
        case.messages,
        system=SYSTEM,
        tools=TOOLS if case.uses_tools else None,
        model=MODELS[fmt],
        max_tokens=MAX_TOKENS,
    )
    assert sdk_problems(fmt, body) == []


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.name)
def test_the_stores_prepared_payloads_are_valid_sdk_requests(
    store: ContextStore, case: Case
) -> None:
    conv = store.create_conversation(model_id="m")
    store.append(conv.id, case.messages)
    for fmt in FORMATS:
        ctx = store.prepare_request(
            conv.id,
            system=SYSTEM,
            tools=TOOLS if case.uses_tools else None,
            format=fmt,
            model=MODELS[fmt],
            max_tokens=MAX_TOKENS,
        )
        assert sdk_problems(fmt, ctx.payload) == [], fmt
        assert sdk_problems(fmt, store.render(conv.id, format=fmt)) == [], fmt


def _call_ids(messages: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The ids of the OpenAI messages' tool calls, and those their tool messages answer."""
    calls = [call["id"] for m in messages for call in m.get("tool_calls") or []]
    return calls, [m["tool_call_id"] for m in messages if m["role"] == "tool"]


@pytest.mark.parametrize("path", params(gemini_files()))
def test_real_gemini_cli_sessions_reach_openai_with_ids_it_accepts(
    store: ContextStore, path: Path
) -> None:
    """Gemini CLI names its calls ``run_shell_command-1763585197546-e63230d39b6f78``, often
    over the 40 characters Chat Completions accepts: each goes in a short form, the same in
    the call and its result, distinct for distinct calls; shorter ids go as stored."""
    cid = import_gemini(store, path).conversation_id
    stored = [
        block["id"]
        for message in store.render(cid)
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_use"
    ]
    prepared = store.prepare_request(cid, format="openai", model=MODELS["openai"]).payload
    rendered = store.render(cid, format="openai")
    assert prepared["messages"] == rendered
    assert sdk_problems("openai", prepared) == []
    assert validate_provider_payload("openai", prepared) == []
    sent, answered = _call_ids(rendered)
    assert sorted(answered) == sorted(sent)
    assert len(sent) == len(stored) and len(set(sent)) == len(set(stored))
    assert all(len(i) <= 40 for i in sent)
    kept = [(given, went) for given, went in zip(stored, sent, strict=True) if len(given) <= 40]
    assert all(given == went for given, went in kept)


@settings(max_examples=150, deadline=None)
@given(paired_conversations())
def test_any_paired_conversation_renders_a_valid_sdk_request(
    messages: list[dict[str, Any]],
) -> None:
    for fmt in FORMATS:
        body = build_request(fmt, messages, system="S", tools=TOOLS, model="m", max_tokens=64)
        assert sdk_problems(fmt, body) == [], (fmt, body)


# -- the oracle rejects what the providers reject ---------------------------------------


def _golden(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((GOLDEN_DIR / f"{name}.json").read_text(encoding="utf-8"))
    return body


BROKEN: list[tuple[str, str, Any]] = [
    ("anthropic", "an unknown block field", lambda b: b["messages"][1]["content"][1].update(x=1)),
    ("anthropic", "an unknown message field", lambda b: b["messages"][0].update(id="m1")),
    ("anthropic", "a role the API has not", lambda b: b["messages"][1].update(role="tool")),
    (
        "anthropic",
        "tool input as text",
        lambda b: b["messages"][1]["content"][1].update(input="{}"),
    ),
    (
        "anthropic",
        "a result without its id",
        lambda b: b["messages"][2]["content"][0].pop("tool_use_id"),
    ),
    ("anthropic", "max_tokens as text", lambda b: b.update(max_tokens="1024")),
    ("openai", "an unknown message field", lambda b: b["messages"][2].update(ts=1)),
    (
        "openai",
        "a tool message without its call id",
        lambda b: b["messages"][3].pop("tool_call_id"),
    ),
    (
        "openai",
        "arguments as an object",
        lambda b: b["messages"][2]["tool_calls"][0]["function"].update(arguments={}),
    ),
    ("openai", "a bad content part", lambda b: b["messages"][1].update(content=[{"type": "img"}])),
    ("gemini", "an unknown part field", lambda b: b["contents"][1]["parts"][1].update(extra=1)),
    ("gemini", "a role the API has not", lambda b: b["contents"][1].update(role=5)),
    (
        "gemini",
        "function args as text",
        lambda b: b["contents"][1]["parts"][1]["functionCall"].update(args="{}"),
    ),
    ("gemini", "an unknown body field", lambda b: b.update(messages=[])),
    (
        "gemini",
        "inline data that is not base64",
        lambda b: b["contents"][0]["parts"].append(
            {"inlineData": {"mimeType": "image/png", "data": "not base64!"}}
        ),
    ),
]


@pytest.mark.parametrize(
    ("fmt", "what", "breaking"), BROKEN, ids=[f"{f}: {w}" for f, w, _ in BROKEN]
)
def test_the_oracle_rejects_a_broken_request(fmt: str, what: str, breaking: Any) -> None:
    body = _golden(f"parallel_tools.{fmt}")
    assert sdk_problems(fmt, body) == []
    broken = copy.deepcopy(body)
    breaking(broken)
    assert sdk_problems(fmt, broken) != [], what


SYSTEM_BLOCKS = [
    {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Answer briefly."},
]


def test_a_system_prompt_of_text_blocks_is_a_valid_request_for_every_provider(
    store: ContextStore,
) -> None:
    """Anthropic gets the blocks as given (cache breakpoints included); OpenAI and Gemini,
    which take one system text, get their texts joined."""
    case = cases()[0]
    conv = store.create_conversation(model_id="m")
    store.append(conv.id, case.messages)
    joined = f"{SYSTEM}\n\nAnswer briefly."
    for fmt in FORMATS:
        ctx = store.prepare_request(
            conv.id, system=SYSTEM_BLOCKS, format=fmt, model=MODELS[fmt], max_tokens=MAX_TOKENS
        )
        assert sdk_problems(fmt, ctx.payload) == [], fmt
        assert store.request_payload(conv.id, ctx.request_id) == ctx.payload
        if fmt == "anthropic":
            assert ctx.payload["system"] == SYSTEM_BLOCKS
        elif fmt == "openai":
            assert ctx.payload["messages"][0] == {"role": "system", "content": joined}
        else:
            assert ctx.payload["systemInstruction"] == {"parts": [{"text": joined}]}
