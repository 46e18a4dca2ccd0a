"""With ``mask_secrets_on_write=True`` no table holds a secret: message extra fields, block
extras, notes, reasons, summaries, rewrites, titles, metadata and system prompts included. A
prepare's default pipeline masks the system prompt in what it sends and stores."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from contextstore import ContextStore
from contextstore.core.errors import InvalidInputError
from contextstore.core.rows import CheckpointRow, RangeRow, SourceRecordRow
from contextstore.processors.pipeline import Pipeline
from contextstore.processors.summarize import Summarizer
from contextstore.storage.tables import metadata as schema
from tests.conftest import BACKENDS, assistant, open_backend, user

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2  # a GitHub token's shape
assert len(TOKEN) == 44


def _all_text(store: ContextStore) -> str:
    """Every row of every table, as text."""
    with store.database.engine.connect() as connection:
        return "\n".join(
            repr(tuple(row))
            for table in schema.sorted_tables
            for row in connection.execute(sa.select(table))
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_table_holds_a_secret_written_through_any_field(backend: str, tmp_path: Path) -> None:
    secret = f"token {TOKEN[:4]}{TOKEN[4:]}"
    store, cleanup = open_backend(backend, tmp_path, mask_secrets_on_write=True)
    try:
        conv = store.create_conversation(title=secret, metadata={"k": [secret]})
        store.append(conv.id, "user", "task", meta={"metrics": {"note": secret}})
        store.append(
            conv.id,
            [
                {"role": "assistant", "content": [{"type": "text", "text": "a", "x": secret}]},
                user("b"),
                assistant("c"),
                user("d"),
            ],
        )
        store.checkpoint(conv.id, "cp", note=secret)
        store.import_timeline(
            conv.id,
            [
                CheckpointRow(4_000_000_000_000, note=secret),
                SourceRecordRow(4_000_000_000_001, "cline", "say", {"text": secret}),
                RangeRow(4_000_000_000_002, end=2, keep="manual", reason=secret),
            ],
        )
        store.set_deleted_range(conv.id, 3, reason=secret, summary=secret)
        store.add_context_update(conv.id, 4, 0, secret, metadata={"why": secret})
        store.truncate(conv.id, "none", summary=secret)
        store.truncate(conv.id, "quarter", summarizer=lambda hidden: secret)
        store.set_conversation_metadata(conv.id, {"k": secret})
        store.fork(conv.id, title=secret)
        ctx = store.prepare_request(conv.id, system=f"You are helpful. {secret}")
        assert TOKEN not in _all_text(store)
        assert "[REDACTED:github_token]" in _all_text(store)
        assert TOKEN not in repr(ctx.payload)
        assert TOKEN not in repr(store.request_payload(conv.id, ctx.request_id))
        assert store.request_payload(conv.id, ctx.request_id) == ctx.payload
    finally:
        cleanup()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_default_pipeline_masks_the_system_prompt_it_sends(
    backend: str, tmp_path: Path
) -> None:
    """Without masking on write: the prompt is masked by the pipeline, in the payload and the
    stored options; with ``Pipeline([])`` it goes as given."""
    store, cleanup = open_backend(backend, tmp_path)
    try:
        conv = store.create_conversation()
        store.append(conv.id, "user", "hi")
        ctx = store.prepare_request(conv.id, system=f"key {TOKEN}")
        assert ctx.payload["system"] == "key [REDACTED:github_token]"
        assert store.request_payload(conv.id, ctx.request_id) == ctx.payload
        assert TOKEN not in _all_text(store)
        raw = store.prepare_request(conv.id, system=f"key {TOKEN}", pipeline=Pipeline([]))
        assert raw.payload["system"] == f"key {TOKEN}"
        assert store.request_payload(conv.id, raw.request_id)["system"] == f"key {TOKEN}"
    finally:
        cleanup()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("writer", ["prepare with processors", "auto-condense", "run_processors"])
def test_a_secret_a_hook_writes_is_masked_in_the_rows_and_in_what_is_sent(
    backend: str, tmp_path: Path, writer: str
) -> None:
    """Summaries and processor outputs are masked before the view is built from them: the
    payload sent holds no secret and rebuilds from the rows. Until 2026-12-05 a prepare
    sent the hook's text as returned and stored it masked, so ``request_payload`` raised
    ``PayloadMismatchError``; ``run_processors`` stored it as returned."""
    store, cleanup = open_backend(
        backend, tmp_path, mask_secrets_on_write=True, pipeline=Pipeline([])
    )
    try:
        cid = store.create_conversation(context_window=64_000).id
        store.append(cid, [user("task"), assistant("ok"), user("long " * 100), assistant("a")])
        store.append(cid, [user("more"), assistant("b")] * 3)
        summarizing = Pipeline([Summarizer(lambda text, request: f"gist {TOKEN}", min_chars=100)])
        if writer == "run_processors":
            assert store.run_processors(cid, pipeline=summarizing)
        else:
            if writer == "auto-condense":
                store.record_request(cid, tokens_in=7_000)  # over 10 % of the window
                ctx = store.prepare_request(
                    cid, auto_condense=0.1, summarizer=lambda hidden: f"gist {TOKEN}"
                )
                assert ctx.truncated
            else:
                ctx = store.prepare_request(cid, pipeline=summarizing)
            assert TOKEN not in repr(ctx.payload)
            assert "[REDACTED:github_token]" in repr(ctx.payload)
            assert store.request_payload(cid, ctx.request_id) == ctx.payload
        assert TOKEN not in _all_text(store)
        assert "[REDACTED:github_token]" in _all_text(store)
    finally:
        cleanup()


def _system_blocks() -> list[dict[str, object]]:
    return [
        {"type": "text", "text": f"key {TOKEN}", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Be brief."},
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("on_write", [False, True], ids=["pipeline", "on write"])
@pytest.mark.parametrize("format", ["anthropic", "openai", "gemini"])
def test_a_system_prompt_of_text_blocks_is_masked_block_by_block(
    backend: str, on_write: bool, format: str, tmp_path: Path
) -> None:
    """Each block's text is masked, by the pipeline or on write, in the payload, the stored
    options and the prompt node; its cache_control stays."""
    store, cleanup = open_backend(backend, tmp_path, mask_secrets_on_write=on_write)
    try:
        conv = store.create_conversation()
        store.append(conv.id, "user", "hi")
        given = _system_blocks()
        pipeline = Pipeline([]) if on_write else None
        ctx = store.prepare_request(conv.id, system=given, format=format, pipeline=pipeline)
        assert given == _system_blocks()  # the caller's blocks are not changed
        masked = "key [REDACTED:github_token]"
        if format == "anthropic":
            assert ctx.payload["system"] == [
                {"type": "text", "text": masked, "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Be brief."},
            ]
        elif format == "openai":
            assert ctx.payload["messages"][0]["content"] == f"{masked}\n\nBe brief."
        else:
            assert ctx.payload["systemInstruction"]["parts"][0]["text"] == f"{masked}\n\nBe brief."
        assert TOKEN not in repr(ctx.payload)
        assert store.request_payload(conv.id, ctx.request_id) == ctx.payload
        assert TOKEN not in _all_text(store)
        if not on_write:
            raw = store.prepare_request(conv.id, system=given, format=format, pipeline=Pipeline([]))
            assert TOKEN in repr(raw.payload)
            assert TOKEN in repr(store.request_payload(conv.id, raw.request_id))
    finally:
        cleanup()


def test_a_system_hook_gets_each_block_s_text_and_its_result_is_checked(
    memory_store: ContextStore,
) -> None:
    class Hook:
        name = "hook"

        def __init__(self, result: object = None) -> None:
            self.seen: list[str] = []
            self.result = result

        def config(self) -> dict[str, object]:
            return {}

        def propose(self, view: object) -> list[object]:
            return []

        def rewrite_system(self, text: str) -> object:
            self.seen.append(text)
            return text.upper() if self.result is None else self.result

    conv = memory_store.create_conversation()
    memory_store.append(conv.id, "user", "hi")
    hook = Hook()
    ctx = memory_store.prepare_request(conv.id, system=_system_blocks(), pipeline=Pipeline([hook]))
    assert hook.seen == [f"key {TOKEN}", "Be brief."]
    assert ctx.payload["system"] == [
        {"type": "text", "text": f"KEY {TOKEN.upper()}", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "BE BRIEF."},
    ]
    for result, message in ((5, "must be a string"), ("  ", r"system\[0\]\.text is blank")):
        with pytest.raises(InvalidInputError, match=message):
            memory_store.prepare_request(
                conv.id, system=_system_blocks(), pipeline=Pipeline([Hook(result)])
            )
    assert len(memory_store.requests(conv.id)) == 1


def _tools() -> list[dict[str, object]]:
    schema = {
        "type": "object",
        "properties": {
            "repo": {"type": "string", "description": f"cloned with the token {TOKEN}"},
            "url": {"type": "string", "default": "https://ci:hunter2x@git.example.com/a.git"},
        },
    }
    return [{"name": "clone", "description": f"GITHUB_TOKEN={TOKEN}", "input_schema": schema}]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("on_write", [False, True], ids=["pipeline", "on write"])
@pytest.mark.parametrize("format", ["anthropic", "openai", "gemini"])
def test_tools_are_masked_like_the_system_prompt(
    backend: str, on_write: bool, format: str, tmp_path: Path
) -> None:
    """Tool definitions are sent to the model and stored: their descriptions, defaults and
    examples are masked, by the pipeline or on write, in the payload, the stored options and
    the prompt nodes; names stay. With ``Pipeline([])`` and no masking on write they go as
    given."""
    store, cleanup = open_backend(backend, tmp_path, mask_secrets_on_write=on_write)
    try:
        conv = store.create_conversation()
        store.append(conv.id, "user", "hi")
        tools = _tools()
        pipeline = Pipeline([]) if on_write else None
        ctx = store.prepare_request(conv.id, tools=tools, format=format, pipeline=pipeline)
        shown = repr(ctx.payload)
        assert TOKEN not in shown and "hunter2x" not in shown
        assert "GITHUB_TOKEN=[REDACTED:github_token]" in shown and "'clone'" in shown
        assert "[REDACTED:url_password]" in shown
        assert store.request_payload(conv.id, ctx.request_id) == ctx.payload
        assert TOKEN not in _all_text(store) and "hunter2x" not in _all_text(store)
        assert tools == _tools()  # the caller's definitions are not changed
        if not on_write:
            raw = store.prepare_request(conv.id, tools=tools, format=format, pipeline=Pipeline([]))
            assert TOKEN in repr(raw.payload)
            assert TOKEN in repr(store.request_payload(conv.id, raw.request_id))
    finally:
        cleanup()


def test_a_tools_hook_that_renames_a_tool_is_refused(memory_store: ContextStore) -> None:
    class Renamer:
        name = "renamer"

        def config(self) -> dict[str, object]:
            return {}

        def propose(self, view: object) -> list[object]:
            return []

        def rewrite_tools(self, tools: list[dict[str, object]]) -> list[dict[str, object]]:
            return [{**tool, "name": "other"} for tool in tools]

    conv = memory_store.create_conversation()
    memory_store.append(conv.id, "user", "hi")
    with pytest.raises(InvalidInputError, match="names unchanged"):
        memory_store.prepare_request(conv.id, tools=_tools(), pipeline=Pipeline([Renamer()]))
    assert memory_store.requests(conv.id) == []


def test_without_masking_on_write_fields_are_stored_as_given(memory_store: ContextStore) -> None:
    """Not vacuous: the rows above would hold the token without the option."""
    conv = memory_store.create_conversation(title=TOKEN)
    memory_store.append(conv.id, "user", "x", meta={"m": TOKEN})
    memory_store.checkpoint(conv.id, note=TOKEN)
    assert _all_text(memory_store).count(TOKEN) == 3
