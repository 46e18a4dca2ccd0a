"""A typed codebase adopting contextstore, written the way the README shows.

``test_typed_user.py`` runs ``mypy --strict`` on this file once, and calls each function at
run time, so the types a user's checker sees and what the store does agree. Each function
is one area; the message and block types are the providers' own (the Anthropic SDK's
``TypedDict`` params, google-genai's ``ContentDict``), as a typed caller holds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from anthropic.types import (
    MessageParam,
    TextBlock,
    TextBlockParam,
    ToolResultBlockParam,
    ToolUseBlock,
    ToolUseBlockParam,
)
from google.genai.types import ContentDict
from typing_extensions import assert_type

from contextstore import (
    BlockUpdate,
    ContextStore,
    FileReadOptimization,
    PreparedRequest,
    TokenCounter,
    UpdateKind,
    ensure_tool_results_follow_tool_use,
    harden_history,
    next_truncation_range,
    optimize_file_reads,
    text_hash,
    truncated_messages,
)
from contextstore.processors import IndexedView, Pipeline, Processor, Summarizer, SummaryRequest
from contextstore.processors.triggers import Trigger

TOOLS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def readme_library(store: ContextStore) -> None:
    """The README's "Library" example: a prepared request's id goes back to the store."""
    conv = store.create_conversation(model_id="claude-sonnet-4-5", context_window=200_000)
    store.append(conv.id, "user", [{"type": "text", "text": "<task>fix the CSV header</task>"}])
    cp = store.checkpoint(conv.id, label="before-refactor")
    ctx: PreparedRequest = store.prepare_request(
        conv.id, system="You are careful.", tools=TOOLS, format="anthropic"
    )
    assert_type(ctx.request_id, int)
    store.record_request(conv.id, request_id=ctx.request_id, tokens_in=1200, tokens_out=80)
    assert store.request_payload(conv.id, ctx.request_id) == ctx.payload
    store.render(conv.id, as_of=cp.ts, format="openai")
    assert store.rollback(conv.id, to="before-refactor")["api_requests"] == 1


def sdk_typed_messages(store: ContextStore) -> int:
    """Messages and blocks held as the Anthropic SDK's ``TypedDict``s; returns the count."""
    conv = store.create_conversation()
    history: list[MessageParam] = [
        {"role": "user", "content": [{"type": "text", "text": "read report.py"}]},
    ]
    store.append(conv.id, history)
    call: ToolUseBlockParam = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "read_file",
        "input": {"path": "report.py"},
    }
    result: ToolResultBlockParam = {"type": "tool_result", "tool_use_id": "toolu_1"}
    calls: tuple[ToolUseBlockParam, ...] = (call,)
    store.append(conv.id, "assistant", calls)
    store.append(conv.id, "user", (block for block in [result]))
    texts: list[TextBlockParam] = [{"type": "text", "text": "done"}]
    store.append(conv.id, "assistant", texts)
    read_only: MessageParam = {"role": "user", "content": "thanks"}
    store.append_many(conv.id, [MappingProxyType(read_only)])
    # A response's blocks are pydantic models: their dumps are what the store takes.
    answer = [TextBlock(type="text", text="again", citations=None)]
    answer_call = ToolUseBlock(type="tool_use", id="toolu_2", name="read_file", input={})
    store.append(conv.id, "assistant", [b.model_dump() for b in [*answer, answer_call]])
    return len(store.messages(conv.id))


class Shout:
    """A processor as a plain class: its name a class attribute."""

    name = "shout"
    local = True

    def config(self) -> dict[str, Any]:
        return {}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        updates: list[BlockUpdate] = []
        for idx, message in view:
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for position, block in enumerate(content):
                text = block.get("text")
                if block.get("type") == "text" and isinstance(text, str) and text != text.upper():
                    updates.append(
                        BlockUpdate(
                            idx,
                            position,
                            UpdateKind.PROCESSOR,
                            text.upper(),
                            source=self.name,
                            base_hash=text_hash(text),
                        )
                    )
        return updates


@dataclass(frozen=True)
class Tagger:
    """A processor as a frozen dataclass: its name a read-only field."""

    name: str = "tagger"
    tag: str = "[seen]"

    def config(self) -> dict[str, str]:
        return {"tag": self.tag}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        return []


class Named:
    """A processor whose name is a property."""

    @property
    def name(self) -> str:
        return "named"

    def config(self) -> dict[str, Any]:
        return {}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        return []


def summarize(text: str, request: SummaryRequest) -> str:
    """A summary hook as the README's "Summarisation" shows it."""
    return f"{request.block_type} of {len(text)} characters"


def custom_processors(store: ContextStore) -> str:
    """A pipeline of the caller's processors; returns the assistant's text as rendered."""
    processors: list[Processor] = [Shout(), Tagger(), Named()]
    summarizer = Summarizer(summarize, min_chars=50)
    summarizer.trigger = Trigger.aged_out(20_000)  # as the README sets one on an instance
    summarizer.depends_on = ("shout",)
    pipeline = Pipeline([*processors, summarizer])
    conv = store.create_conversation()
    store.append(conv.id, "user", "the task")
    store.append(conv.id, "assistant", [{"type": "text", "text": "on it"}])
    rendered = store.render(conv.id, format="anthropic", pipeline=pipeline)
    text: str = rendered[1]["content"][0]["text"]
    return text


class WordCounter:
    """A token counter with only ``count``, as the README asks of one."""

    def count(self, text: str) -> int:
        return len(text.split())


@dataclass(frozen=True)
class FixedCounter:
    """A token counter as a frozen dataclass, naming its encoding."""

    name: str = "fixed"
    per_text: int = 7

    def count(self, text: str) -> int:
        return self.per_text


def token_counters() -> list[int]:
    """Stores counting with the caller's counters; each first message's token count."""
    counters: list[TokenCounter] = [WordCounter(), FixedCounter()]
    counts = []
    for counter in counters:
        with ContextStore.open(":memory:", token_counter=counter) as store:
            conv = store.create_conversation()
            counts.append(store.append(conv.id, "user", "three words here").token_count)
    return counts


def sdk_history() -> Iterator[MessageParam]:
    yield {"role": "user", "content": "the task"}
    yield {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}],
    }
    yield {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}
    yield {"role": "assistant", "content": "read"}
    yield {"role": "user", "content": "go on"}
    yield {"role": "assistant", "content": "done"}


def pure_functions() -> tuple[tuple[int, int], int, int, bool, int]:
    """The pure functions on a history held as SDK types."""
    messages = list(sdk_history())
    deleted = next_truncation_range(messages, None, "half")
    view = truncated_messages(messages, deleted)
    paired = ensure_tool_results_follow_tool_use(messages)
    optimized: FileReadOptimization = optimize_file_reads(messages)
    contents: list[ContentDict] = [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"text": "hello"}]},
    ]
    hardened = harden_history(contents)
    return deleted, len(view), len(paired), optimized.changed, len(hardened)
