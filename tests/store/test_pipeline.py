"""Processors on the store: rows for what the model saw, stale results, the render cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text as sql

from contextstore import ContextStore
from contextstore.processors import Distiller, Pipeline, SecretMasker
from tests.conftest import BACKENDS, assistant, open_backend, tool_result, tool_use, user

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_secrets_are_masked_in_every_format_and_the_original_stays(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(
        conv.id,
        [
            user(f"use {TOKEN} please"),
            assistant(tool_use("t", name="sh", cmd=f"curl -H {TOKEN}")),
            user(tool_result("t", f"ok {TOKEN}")),
        ],
    )
    for format in (None, "anthropic", "openai", "gemini"):
        assert TOKEN not in json.dumps(store.render(conv.id, format=format))
    ctx = store.prepare_request(conv.id, format="gemini")
    assert TOKEN not in json.dumps(ctx.payload) and "[REDACTED:github_token]" in json.dumps(
        ctx.payload
    )
    assert TOKEN in json.dumps(store.messages(conv.id))
    updates = store.context_updates(conv.id)
    assert {(u["kind"], u["source"]) for u in updates} == {("processor", "secret_mask")}
    assert all(len(u["base_hash"]) == 64 for u in updates)
    assert store.request_payload(conv.id, ctx.request_id) == ctx.payload


def test_a_repeat_render_does_no_processing(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [user("a\n\n\n\n\nb"), assistant("ok")])
    first = store.render(conv.id, pipeline=Pipeline([Distiller()]))
    misses = store.render_cache.misses
    again = store.render(conv.id, pipeline=Pipeline([Distiller()]))
    assert again == first and store.render_cache.misses == misses
    assert store.render_cache.hits >= 1
    store.append(conv.id, "user", "more")
    store.render(conv.id, pipeline=Pipeline([Distiller()]))
    assert store.render_cache.misses == misses + 1


def _text_document(data: str) -> dict[str, object]:
    return {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": data},
    }


TEXT_DOCUMENTS = {
    "a document": [_text_document(f"token {TOKEN}"), {"type": "text", "text": "see"}],
    "a document in a tool result": [
        {
            "type": "tool_result",
            "tool_use_id": "t",
            "content": [{"type": "text", "text": "read"}, _text_document(f"token {TOKEN}")],
        }
    ],
    "a document first in a tool result": [
        {"type": "tool_result", "tool_use_id": "t", "content": [_text_document(f"k {TOKEN}")]}
    ],
}


@pytest.mark.parametrize("content", TEXT_DOCUMENTS.values(), ids=list(TEXT_DOCUMENTS))
def test_a_secret_in_a_plain_text_document_is_masked(
    store: ContextStore, content: list[dict[str, object]]
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [user("task"), assistant(tool_use("t", name="read", path="a"))])
    store.append(conv.id, "user", content)
    for format in (None, "anthropic", "openai", "gemini"):
        rendered = json.dumps(store.render(conv.id, format=format))
        assert TOKEN not in rendered and "[REDACTED:github_token]" in rendered, format
    ctx = store.prepare_request(conv.id, format="anthropic")
    assert TOKEN not in json.dumps(ctx.payload)
    assert TOKEN in json.dumps(store.messages(conv.id))  # the original stays


@pytest.mark.parametrize("content", TEXT_DOCUMENTS.values(), ids=list(TEXT_DOCUMENTS))
def test_masking_on_write_masks_plain_text_documents_wherever_they_are(
    tmp_path: Path, content: list[dict[str, object]]
) -> None:
    with ContextStore.open(tmp_path / "masked.db", mask_secrets_on_write=True) as store:
        conv = store.create_conversation()
        store.append(conv.id, [user("task"), assistant(tool_use("t", name="read", path="a"))])
        store.append(conv.id, "user", content)
        assert TOKEN not in json.dumps(store.messages(conv.id))
    assert TOKEN.encode() not in (tmp_path / "masked.db").read_bytes()


def _rewritten_in_place(rewriter: ContextStore, conversation_id: str, how: str) -> None:
    """What an importer does when the other agent rewrote its history: the rows go and
    come back under the same timestamps, now holding a secret."""
    if how == "discarded":
        rewriter.discard_imported_rows(conversation_id, after=3000)
    else:
        rewriter.delete_conversation(conversation_id)
        rewriter.create_conversation(id=conversation_id, created_ts=1000)
        rewriter.append(conversation_id, "user", "hello", ts=2000)
        rewriter.append(conversation_id, "assistant", "hi", ts=3000)
    rewriter.append(conversation_id, "user", f"token {TOKEN}", ts=4000)


@pytest.mark.parametrize("how", ["discarded", "recreated"])
@pytest.mark.parametrize("where", ["this store", "another process"])
def test_rows_replaced_under_the_same_timestamps_are_never_rendered_from_the_cache(
    tmp_path: Path, how: str, where: str
) -> None:
    path = tmp_path / "agent.db"
    with ContextStore.open(path) as store:
        cid = store.create_conversation(id="c1", created_ts=1000).id
        store.append(cid, "user", "hello", ts=2000)
        store.append(cid, "assistant", "hi", ts=3000)
        store.append(cid, "user", "plain", ts=4000)
        assert store.render(cid, format="openai")[-1]["content"] == "plain"
        if where == "this store":
            _rewritten_in_place(store, cid, how)
        else:
            with ContextStore.open(path) as other:
                _rewritten_in_place(other, cid, how)
        for format in (None, "anthropic", "openai", "gemini"):
            rendered = json.dumps(store.render(cid, format=format))
            assert TOKEN not in rendered and "[REDACTED:github_token]" in rendered, format


def test_a_processor_result_for_a_changed_block_is_stale(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [user("task"), assistant("x   \n\n\n\n\ny")])
    store.add_context_update(conv.id, 1, 0, "rewritten by hand")
    ctx = store.prepare_request(conv.id, pipeline=Pipeline([Distiller()]))
    assert ctx.messages[1]["content"][0]["text"] == "rewritten by hand"
    assert [u["kind"] for u in store.context_updates(conv.id)] == ["manual"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_masking_before_write_never_stores_the_secret(backend: str, tmp_path: Path) -> None:
    store, cleanup = open_backend(backend, tmp_path, mask_secrets_on_write=True)
    try:
        conv = store.create_conversation()
        store.append(conv.id, "user", f"token {TOKEN}")
        with store.database.engine.connect() as connection:
            rows = connection.execute(sql("SELECT text, data FROM blocks")).all()
        assert TOKEN not in repr(rows) and "REDACTED" in repr(rows)
    finally:
        cleanup()


def test_no_pipeline_means_the_stored_text(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", f"{TOKEN}")
    assert store.render(conv.id, pipeline=Pipeline([]))[0]["content"] == TOKEN
    assert store.render(conv.id, pipeline=Pipeline([SecretMasker()]))[0]["content"] != TOKEN


def test_a_parallel_pipeline_writes_what_a_sequential_one_writes(
    store: ContextStore,
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [user(f"key {TOKEN}\n\n\n\n\nend   "), assistant("ok")])
    processors = [SecretMasker(), Distiller()]
    sequential = store.render(conv.id, pipeline=Pipeline(processors))
    parallel = store.render(conv.id, pipeline=Pipeline(processors, parallel=True))
    assert parallel == sequential and TOKEN not in json.dumps(parallel)


def test_reads_a_pipeline_rewrote_are_still_de_duplicated(store: ContextStore) -> None:
    # Distilled (trailing spaces) and masked (a key) reads: the context manager reads them
    # as shown, so repeated reads are replaced instead of half the history being hidden.
    body = "".join(f"x{n} = 1   \n" for n in range(1500)) + f"key = {TOKEN}\n"
    conv = store.create_conversation(context_window=64_000)
    store.append(conv.id, [user("<task>t</task>"), assistant("ok")])
    for n in range(4):
        store.append(conv.id, [user(f"[read_file for 'a.py'] Result:\n{body}"), assistant(f"{n}")])
    store.append(conv.id, "user", "go")
    pipeline = Pipeline([SecretMasker(), Distiller()])
    store.prepare_request(conv.id, pipeline=pipeline)
    store.record_request(conv.id, tokens_in=50_000)
    ctx = store.prepare_request(conv.id, pipeline=pipeline)
    assert (ctx.decision.action, ctx.decision.deleted_range) == ("dedupe", None)
    assert ctx.decision.deduplicated == (2, 4, 6)
    assert TOKEN not in json.dumps(ctx.payload)
